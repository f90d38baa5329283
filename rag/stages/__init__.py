"""The pipeline's stages as functions: each takes its typed config section (:mod:`rag.sections`),
the device where it computes, and explicit input and output paths; the ``rag`` subcommands
(:mod:`rag.cli`) parse arguments, read the section file(s) and call one of them. One module per
group of rules: datasets, indexing, pretraining, fine_tuning, evaluation, experiments
(model_loading: the variant's RAG system from a model folder, shared).
"""
