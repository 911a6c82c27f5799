"""A chat template turned into prompt text, the same way for every local runtime.

The agent's last message is often its own scratchpad (an assistant message), which the model must
continue rather than close; some templates alter a continued message (strip it, for one), and then
the prompt opens a new assistant turn and appends the scratchpad raw. `template_renderer` renders a
template string (a GGUF file's `tokenizer.chat_template`) with transformers' own Jinja renderer, so
a file gives the same prompt text under llama.cpp as under transformers.
"""

from __future__ import annotations

from collections.abc import Callable

from ..format.messages import Message

#: apply(messages, add_generation_prompt, continue_final_message) -> prompt text
Apply = Callable[[list[Message], bool, bool], str]


def render_chat(apply: Apply, messages: list[Message]) -> str:
    """The prompt text for `messages`: a new assistant turn opened, or a trailing assistant message continued."""
    last = messages[-1] if messages else {}
    if last.get("role") != "assistant":
        return apply(messages, True, False)
    scratchpad = last["content"]
    if scratchpad:
        from jinja2 import TemplateError

        try:
            text = apply(messages, False, True)
            if text.endswith(scratchpad):
                return text
        except (ValueError, TemplateError):
            pass
    return apply(messages[:-1], True, False) + scratchpad


def template_renderer(template: str, **special_tokens: str) -> Apply:
    """An `Apply` for a Jinja chat template string (taking `tools` too); `special_tokens` (bos_token,
    eos_token) are its variables."""
    from transformers.utils.chat_template_utils import render_jinja_template

    def apply(
        messages: list[Message],
        add_generation_prompt: bool,
        continue_final_message: bool,
        tools: list[dict] | None = None,
    ) -> str:
        rendered, _ = render_jinja_template(
            [list(messages)],
            chat_template=template,
            tools=tools or None,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
            **special_tokens,
        )
        return rendered[0]

    return apply
