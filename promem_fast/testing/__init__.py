"""Test stand-ins: deterministic models and rules that let the tests and dry runs exercise every branch.

The scripted chat model (:mod:`.llm_scripted`), the word-overlap NLI checker (:mod:`.nli_lexical`), the
hashing embedder (:mod:`.embed_hashing`), the scripted evaluation answers and judges (:mod:`.eval_rules`),
the tiny randomly initialised NLI classifier (:mod:`.tiny_nli`) and Llama with its trained tokenizer
(:mod:`.tiny_llama`), and the pure-Python reference of the native core (:mod:`.native_reference`), which
the tests and the benchmarks both use. None of them is a model: what they say about quality means nothing.
They sit above every product layer (they read the product's prompt templates to answer them) and the
product never imports them; the backend registry names the first three by a ``module:Class`` string, so
the ``scripted`` profile loads them only when chosen.
"""
