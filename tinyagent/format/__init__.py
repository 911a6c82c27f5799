"""The text of the protocols (layer 1), ReAct and the model's own tool calls: pure text in, text or data
out; no model, no I/O.

- prompts.py: the system prompt (en / zh), tool lines, stop words, the forced answer, distilling.
- examples.py: worked few-shot examples and `examples_for`.
- reading.py: `read_step`, what one reply says; names.py: which tool it meant.
- arguments.py: a tool's arguments from what the model wrote, repaired, and the form to copy.
- observations.py: what the model reads after a step (errors, cut markers, control tokens).
- messages.py: the conversation and the scratchpad (or the tools protocol's turns) as chat messages.
- step_format.py: one reply as a pattern, for constrained decoding and regex-guided servers.
- kinds.py: `StepKind`, what a step was.
- tool_formats.py: the model's own tool-call formats (hermes, llama3, mistral, internlm2); tool_reading.py:
  `read_calls`, the calls of a reply in them; extents.py: where its objects end, in one pass.
- direct.py: the no-agent baseline's plain prompt and its answer line (the eval's `--baseline direct`).
"""
