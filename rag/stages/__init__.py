"""The pipeline's stages as functions: each takes its typed config section (:mod:`rag.sections`:
the section(s) its rule reads), the device where it computes, and explicit input and output
paths; the ``rag`` subcommands (:mod:`rag.cli`) parse arguments, read
the section file(s), call :func:`rag.runtime.setup` and call one of these.

- :mod:`rag.stages.datasets`: corpus, task files, hot-swap questions
- :mod:`rag.stages.indexing`: passage encoding, FAISS index, BM25 index
- :mod:`rag.stages.pretraining`: the shared pretrained generator
- :mod:`rag.stages.fine_tuning`: fine-tuning one task x variant
- :mod:`rag.stages.evaluation`: decoding and scoring dev and test with a saved model
- :mod:`rag.stages.experiments`: Figure 3's top-K sweep, the index hot-swap, the gold-passage reader
- :mod:`rag.stages.model_loading`: the variant's RAG system from a model folder (the stages above share it)
"""
