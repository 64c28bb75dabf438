"""Reading a run's logs back and drawing its report."""
