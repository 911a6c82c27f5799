"""How a local model runs (layer 2): the inference engine under `HFChatModel`. It imports neither the
backends (models/), nor the agent, nor tools; torch and transformers are imported where used.

- loading.py: device and dtype placement, loading from a hub id, a folder or a GGUF file;
  gguf_cache.py: a local GGUF file converted once; internlm2_loading.py, internlm2_tokenizer.py:
  InternLM2 checkpoints as Llama, without their remote code.
- prefix_cache.py: one conversation's KV cache reused across calls (exact, on token ids);
  kept_prefixes.py: many conversations' caches kept between calls.
- batching.py: concurrent generate calls decoded together; packed.py: one packed forward pass and its
  attention; slots.py: decoding requests' caches side by side.
- streaming.py: streamer, stopping criteria read on decoded text, `stream()` over a worker thread.
- repetition.py: repetition control within a reply; automaton.py: a reply pattern compiled into a token
  automaton with per-state budgets; constrained.py: the logits processor that walks it.
"""
