"""Test stand-ins: deterministic models and rules that let the tests and dry runs exercise every branch.

The scripted chat model (:mod:`.llm_scripted`), the word-overlap NLI checker (:mod:`.nli_lexical`), the
hashing embedder (:mod:`.embed_hashing`) and one that pads its batches as a real model does
(:mod:`.embed_padded`), the scripted evaluation answers and judges (:mod:`.eval_rules`), the tiny randomly
initialised NLI classifier (:mod:`.tiny_nli`), LLMLingua-2-shaped token classifier (:mod:`.tiny_compressor`)
and Llama with its trained tokenizer (:mod:`.tiny_llama`), and
the pure-Python reference of the native core (:mod:`.native_reference`), which the tests and the benchmarks
both use. None of them is a model: what they say about quality means nothing.
Beside them, for the tests and benchmarks of the service: a real PostgreSQL with pgvector (:mod:`.pg_server`)
and the service's own processes, ``promem serve`` replicas and ``promem worker`` (:mod:`.service_processes`).

They sit above every product layer (they read the product's prompt templates to answer them) and the
product never imports nor names them: the first three join the backend registry as a plugin
(:data:`BACKENDS`, declared under the entry-point group ``promem_fast.backends`` in ``pyproject.toml``),
read only when a configuration asks for a backend the product does not have, such as the ``scripted``
profile's. Each module is imported only when its backend is built.
"""

from __future__ import annotations

from promem_fast.backends import BackendSpec

BACKENDS: tuple[BackendSpec, ...] = (
    BackendSpec("llm", "scripted", "promem_fast.testing.llm_scripted:ScriptedLLM", None,
                "deterministic rule-based replies for tests and dry runs of the control flow"),
    BackendSpec("nli", "lexical", "promem_fast.testing.nli_lexical:LexicalNLI", None,
                "deterministic content-word overlap checker (tests, dry runs)"),
    BackendSpec("embedder", "hashing", "promem_fast.testing.embed_hashing:HashingEmbedder", None,
                "deterministic hashed bag of words (tests, dry runs)"),
)
"""The stand-in backends, registered through the ``promem_fast.backends`` entry point."""
