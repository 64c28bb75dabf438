"""Text classifiers as files and as code, below the stages that use them: fastText's model format read
(`fasttext_model`: language ID's lid.176 and any supervised model) and written (`fasttext_bin`), its
supervised training kernels (`fasttext_train`), scorers for fastText and Hugging Face
sequence-classification models (`score_models`, `score_fasttext`, `score_hf`) and the ROC AUC (`auc`).
`filter` (language ID, the `classifier` step) and `quality` (`ptk classifier train`, `ptk score`) use
them; they import neither."""
