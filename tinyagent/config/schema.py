"""What a config is: four sections of typed settings, each with its default.

`model` (which backend and weights), `generation` (sampling settings), `agent` (language,
turn cap, tools) and `web` (the chat page's login and limits). Every key has a default, so an
empty file (or no file) means the embedded SmolLM2 model.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

BACKENDS = ("embedded", "hf", "internlm2", "llamacpp", "openai")
RUNTIMES = ("auto", "llamacpp", "hf")  # the embedded model's: auto is llama.cpp where it is installed
TOOL_NAMES = ("google_search", "calculator", "local_search")
LANGS = ("auto", "en", "zh")
DTYPES = ("auto", "float32", "float16", "bfloat16")
SERPER_KEY_ENV = "SERPER_API_KEY"


class ConfigError(ValueError):
    """A configuration mistake a user made; the message is one line naming the file and key."""


@dataclass
class ModelConfig:
    backend: str = "embedded"
    path: str | None = None          # hub id or local folder (hf, internlm2); a .gguf file (llamacpp)
    gguf_file: str | None = None     # a .gguf file inside `path` (hf, llamacpp)
    runtime: str = "auto"            # embedded: llamacpp, hf, or auto (llamacpp where installed)
    device: str = "auto"
    dtype: str = "auto"
    trust_remote_code: bool = False
    name: str | None = None          # openai: the served model name
    base_url: str | None = None      # openai: e.g. http://127.0.0.1:8000/v1
    api_key_env: str | None = "OPENAI_API_KEY"
    scratchpad: str = "continue"     # openai: continue the assistant message, or fold it into the user turn
    guided_decoding: str | None = None  # openai: structured_outputs | guided_regex (vLLM), for constrained runs
    timeout: float = 60.0            # openai: seconds without an answer before a retry
    max_retries: int = 2
    deadline: float = 600.0          # openai: seconds one model call may take in all, retries included
    max_response_bytes: int = 8 * 1024 * 1024  # openai: the most of one answer read
    max_batch: int = 8               # hf, internlm2, embedded: generate calls run together (1: one at a time)
    kept_prefixes: int | None = None  # local backends: conversations whose KV cache is kept between calls (null:
                                      # 16 on transformers; on llama.cpp its max_batch sequences)
    context_window: int | None = None  # openai: the served window (null: from the model list); llamacpp: tokens
                                       # per conversation (null: the file's, at most 32768)
    kv_cells: int | None = None      # llamacpp: KV cells of all conversations (null: 32768, or a window each)
    threads: int | None = None       # llamacpp: CPU threads (null: the free physical cores, at least one)
    weight_type: str = "auto"        # llamacpp: auto (a type with fast kernels, converted once), file, q8_0, q4_0, ...


@dataclass
class GenerationConfig:
    max_new_tokens: int = 512
    temperature: float = 0.0
    top_p: float = 1.0
    # Local models (hf, internlm2, embedded) only; null leaves them out. Within the reply, not the prompt:
    repetition_penalty: float | None = None   # > 1 lowers tokens the reply already used
    no_repeat_ngram_size: int | None = None   # bans repeating an n-gram of the reply
    max_line_tokens: int | None = None        # line budget of constrained replies (format.step_format.MAX_LINE_TOKENS)


#: AgentConfig fields that choose tools, and those that choose hooks (approval, tracing); every other
#: field is passed to `Agent(...)` as is.
TOOL_FIELDS = ("tools", "corpus", "mcp_servers")
HOOK_FIELDS = ("approve", "approve_mcp", "otel")
APPROVALS = ("ask", "always", "never")


@dataclass
class AgentConfig:
    lang: str = "auto"
    max_turns: int = 5
    tools: list[str] = field(default_factory=lambda: list(TOOL_NAMES))
    corpus: str | None = None        # JSONL file for local_search
    mcp_servers: list[dict] = field(default_factory=list)  # [{command, args, env, timeout, tools}]
    max_observation_chars: int | None = 4000
    llm_fallback: bool = False           # offer the model itself as a tool when no tool fits
    distill_observations: bool = False   # have the model shorten long observations
    constrained: bool | None = None      # decode only valid steps; null: on for the embedded model
    protocol: str = "react"              # react (ReAct text), tools (the model's own tool calls) or auto
    examples: bool = False               # worked examples for the agent's tools in the system prompt (few-shot)
    recheck: str = "failed"              # answers sent back once to be checked: off | failed (right after a failed
                                         # call) | results (also one that only repeats the last tool result)
    ask_answer: bool = True              # a ReAct reply that only reasons is asked its Final Answer in the same step
    thought_first: bool = False          # ReAct replies begin with `Thought:` (one that only reasons is asked its
                                         # answer); off: measured, it cost the 0.5B model half its right answers
    working_first: bool | None = None    # ReAct: the model first works the question out as it would alone (no
                                         # tools, no format), then is offered the tools to check it; null: on for
                                         # free decoding, off when constrained (measured: evals/README.md)
    check_arithmetic: bool | None = None  # with working_first: the calculator checks the working's written
                                         # arithmetic, its first wrong result is set right and the model goes on
                                         # from there; null: on when the calculator is one of the tools
    approve: dict[str, str] = field(default_factory=dict)  # {tool_name: ask | always | never} before each call
    approve_mcp: str = "always"          # MCP tools not named in `approve` (--approve: ask); built-ins: always
    otel: bool = False                   # OpenTelemetry spans for runs, model and tool calls (needs tinyagent[otel])

    def agent_kwargs(self) -> dict:
        """The settings `Agent(...)` takes, under its own keyword names."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in TOOL_FIELDS + HOOK_FIELDS}


@dataclass
class WebConfig:
    auth_user: str | None = None     # a login for the chat page; the password is read from auth_password_env
    auth_password_env: str = "TINYAGENT_WEB_PASSWORD"
    max_question_chars: int = 4000
    max_sessions: int = 100          # conversations kept; the least recently used idle one makes room
    session_ttl: float = 3600.0      # seconds an idle conversation is kept
    max_runs: int = 4                # questions answered at once; more wait in line, told their place


SECTIONS: dict[str, type] = {"model": ModelConfig, "generation": GenerationConfig, "agent": AgentConfig,
                             "web": WebConfig}


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    web: WebConfig = field(default_factory=WebConfig)
    source: str | None = None        # the file it was read from

    def generation_kwargs(self) -> dict:
        """The generation settings that are set (None ones are left out, so backends without them work)."""
        return {k: v for k, v in dataclasses.asdict(self.generation).items() if v is not None}

    def to_dict(self) -> dict:
        return {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}
