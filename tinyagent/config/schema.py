"""What a config is: five sections of typed settings, each with its default.

`model` (which backend and weights), `generation` (sampling settings), `agent` (language,
turn cap, tools), `web` (the chat page's login and limits) and `serve` (the API's and MCP server's). Every key has a default, so an
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
    path: str | None = None  # hub id or local folder (hf, internlm2); a .gguf file (llamacpp)
    gguf_file: str | None = None  # a .gguf file inside `path` (hf, llamacpp)
    runtime: str = "auto"  # embedded: llamacpp, hf, or auto (llamacpp where installed)
    device: str = "auto"
    dtype: str = "auto"
    trust_remote_code: bool = False
    name: str | None = None  # openai: the served model name
    base_url: str | None = None  # openai: e.g. http://127.0.0.1:8000/v1
    api_key_env: str | None = "OPENAI_API_KEY"
    scratchpad: str = "continue"  # openai: continue the assistant message, or fold it into the user turn
    guided_decoding: str | None = None  # openai: structured_outputs | guided_regex (vLLM), for constrained runs
    timeout: float = 60.0  # openai: seconds without an answer before a retry
    max_retries: int = 2
    deadline: float = 600.0  # openai: seconds one model call may take in all, retries included
    max_response_bytes: int = 8 * 1024 * 1024  # openai: the most of one answer read
    max_batch: int = 8  # hf, internlm2, embedded: generate calls run together (1: one at a time)
    kept_prefixes: int | None = None  # local backends: conversations whose KV cache is kept between calls (null:
    # 16 on transformers; on llama.cpp its max_batch sequences)
    context_window: int | None = None  # openai: the served window (null: from the model list); llamacpp: tokens
    # per conversation (null: the file's, at most 32768)
    kv_cells: int | None = None  # llamacpp: KV cells of all conversations (null: 32768, or a window each)
    threads: int | None = None  # llamacpp: CPU threads (null: the free physical cores, at least one)
    weight_type: str = "auto"  # llamacpp: auto (a type with fast kernels, converted once), file, q8_0, q4_0, ...


@dataclass
class GenerationConfig:
    max_new_tokens: int = 512
    temperature: float = 0.0
    top_p: float = 1.0
    # Local models (hf, internlm2, embedded) only; null leaves them out. Within the reply, not the prompt:
    repetition_penalty: float | None = None  # > 1 lowers tokens the reply already used
    no_repeat_ngram_size: int | None = None  # bans repeating an n-gram of the reply
    max_line_tokens: int | None = None  # line budget of constrained replies (format.step_format.MAX_LINE_TOKENS)


#: AgentConfig fields that choose tools, that choose hooks (approval, tracing), and that are the protocol's own
#: settings (`tinyagent.ReAct`, `tinyagent.Tools`); every other field is passed to `Agent(...)` as is.
TOOL_FIELDS = ("tools", "corpus", "mcp_servers", "llm_fallback", "search_tool")
HOOK_FIELDS = ("approve", "approve_mcp", "otel")
OBSERVATION_FIELDS = ("max_observation_chars", "distill_observations")
PROTOCOL_FIELDS = (
    "constrained",
    "examples",
    "recheck",
    "ask_answer",
    "thought_first",
    "working_first",
    "check_arithmetic",
    "search",
    "parallel",
    "max_calls",
)
APPROVALS = ("ask", "always", "never")


@dataclass
class AgentConfig:
    lang: str = "auto"
    max_turns: int = 5
    tools: list[str] = field(default_factory=lambda: list(TOOL_NAMES))
    corpus: str | None = None  # local_search's documents: a folder (Markdown, text, HTML, PDF) or a JSONL file
    mcp_servers: list[dict] = field(default_factory=list)  # [{command, args, env, timeout, tools}]
    search_tool: str | None = None  # the tool the eval's retrieve-then-answer baseline searches with (an MCP
    # tool's name, say); null: the first of local_search, google_search
    max_observation_chars: int | None = 4000
    llm_fallback: bool = False  # offer the model itself as a tool when no tool fits
    distill_observations: bool = False  # have the model shorten long observations
    protocol: str = "react"  # react (ReAct text), tools (the model's own tool calls) or auto
    # The protocol's own settings. null: the protocol's default (docs/protocols.md), decided for the model and
    # tools in one place (`ReAct.resolved`), the same as `Agent(model, tools)` in Python.
    constrained: bool | None = None  # decode only valid steps; default: on for the embedded model
    examples: bool | None = None  # react: the shipped worked examples for the tools (default off)
    recheck: str | None = None  # react: off | failed (default) | results
    ask_answer: bool | None = None  # react: a reply that only reasons is asked its answer (default on)
    thought_first: bool | None = None  # react: replies begin with `Thought:` (default off)
    working_first: bool | None = None  # react: the model's own working first (default: on when decoded free)
    check_arithmetic: bool | None = None  # react: the calculator sets the working right (default: with calculator)
    search: str | None = None  # react: first (the question searched before the model's first reply) |
    # tool (only when the model calls it); default: first with a search tool
    parallel: bool | None = None  # tools: the calls of one reply run at once (default on)
    max_calls: int | None = None  # tools: the most calls of one reply that run (default 5)
    approve: dict[str, str] = field(default_factory=dict)  # {tool_name: ask | always | never} before each call
    approve_mcp: str = "always"  # MCP tools not named in `approve` (--approve: ask); built-ins: always
    otel: bool = False  # OpenTelemetry spans for runs, model and tool calls (needs tinyagent[otel])

    def agent_kwargs(self) -> dict:
        """The settings `Agent(...)` takes as they are (the protocol and observations are built apart)."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in TOOL_FIELDS + HOOK_FIELDS + OBSERVATION_FIELDS + PROTOCOL_FIELDS + ("protocol",)
        }

    def protocol_settings(self) -> dict:
        """The protocol settings this config sets (null ones are left to the protocol's defaults)."""
        return {name: getattr(self, name) for name in PROTOCOL_FIELDS if getattr(self, name) is not None}


@dataclass
class WebConfig:
    auth_user: str | None = None  # a login for the chat page; the password is read from auth_password_env
    auth_password_env: str = "TINYAGENT_WEB_PASSWORD"
    max_question_chars: int = 4000
    max_sessions: int = 100  # conversations kept; the least recently used idle one makes room
    session_ttl: float = 3600.0  # seconds an idle conversation is kept
    max_runs: int = 4  # questions answered at once; more wait in line, told their place
    store: bool | str = False  # keep the conversations in the conversation store (true: the default
    # file under the user's data directory; a string: that file)


@dataclass
class ServeConfig:
    """`tinyagent serve` (the OpenAI-compatible API) and `tinyagent mcp-server` over HTTP."""

    name: str | None = None  # the model name clients ask for (null: the config file's name, or tinyagent)
    api_key_env: str = "TINYAGENT_API_KEY"  # the variable holding the key clients must send (--api-key wins)
    max_runs: int = 4  # questions answered at once; more wait their turn
    max_waiting: int = 16  # requests waiting for a turn; more are refused (HTTP 429)
    max_request_bytes: int = 1_000_000  # the largest request body read (HTTP 413 beyond)
    max_question_chars: int = 4000


SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "generation": GenerationConfig,
    "agent": AgentConfig,
    "web": WebConfig,
    "serve": ServeConfig,
}


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    web: WebConfig = field(default_factory=WebConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)
    source: str | None = None  # the file it was read from

    def generation_kwargs(self) -> dict:
        """The generation settings that are set (None ones are left out, so backends without them work)."""
        return {k: v for k, v in dataclasses.asdict(self.generation).items() if v is not None}

    def to_dict(self) -> dict:
        return {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}
