"""The front of the engine (vLLM v1's engine/ and entrypoints/llm.py): the engine loop, LLMEngine
(llm_engine.py: add_request, step = schedule, run, update); the offline API a vLLM user knows, LLM
(llm.py); incremental detokenization (detokenizer.py); chat templates (chat.py); and the concurrency
ladder that drives the engine directly (ladder.py)."""
