"""The RAG system and its parts: the generator (a BART, with a copy mechanism), its tokenizer and
pretraining examples, the marginalisation over documents, the decoders."""
