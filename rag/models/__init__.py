"""The RAG system and its parts: the generator interface and its families (a BART with a copy
mechanism, any causal language model), the tokenizer and pretraining examples, the
marginalisation over documents, the decoders."""
