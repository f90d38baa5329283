"""The scorers behind :mod:`rag.metrics`, one concern a module: matching answers
(``answer_match``), coco-caption's tokenization (``ptb_tokenizer``), BLEU-1 and ROUGE-L
(``coco``) and Q-BLEU-1 (``qbleu``). :mod:`rag.metrics` names the metrics built from them."""
