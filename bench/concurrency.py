"""Many agents on one local model: the recorded episodes replayed as N agents at once vs one after another.

Each agent replays its own episode (all recorded episodes in order, cycled when N is larger: copies
of one episode would share whole prompts) with its recorded replies forced
token by token through the model's `generate`, so every run does the same work whatever the
weights. Concurrently, the agents' decode steps share batched forward passes: on transformers packed passes
(engine/batching.py), on llama.cpp one `llama_decode` per step carrying a token of each agent
(engine/llama_batching.py), each conversation kept as a sequence of llama.cpp's cache (engine/sequences.py);
sequentially they run one by one on the same model. Tokens
processed are counted by the batcher or by llama.cpp itself; the lower bound is each agent's final
transcript, each token through the model once.
"""

from __future__ import annotations

import sys
import threading
import time

from recorded import PROTOCOL, EpisodeError
from replay import ForceTokens, RecordedReply, reply_ids
from runtimes import batching, decode_steps, fed_tokens, shared_tokens

from tinyagent import Agent
from tinyagent.format.prompts import STOP_WORDS
from tinyagent.models.model import BaseModel, Reply


class ForcedReplies(BaseModel):
    """The recorded replies forced through the model, one per call; safe to run beside other agents
    (unlike `ReplayModel`, it counts no forward passes: hooks would count every agent's)."""

    def __init__(self, model, replies: list[RecordedReply], max_new_tokens: int):
        self.model, self.replies, self.max_new_tokens = model, list(replies), max_new_tokens
        self.control_tokens = model.control_tokens
        self.transcript_tokens = 0  # the latest prompt and its reply: the lower bound of this agent's run
        self.decoded = 0  # reply tokens of all its calls: one forward pass each, one after another

    def generate(self, messages, stop=None, **ignored) -> Reply:
        reply = self.replies.pop(0)
        prompt_text = self.model.render_prompt(messages)
        prompt_ids = self.model.encode_prompt(prompt_text)
        forced = reply_ids(self.model, prompt_text, prompt_ids, reply.text)
        completion = self.model.generate(
            messages,
            stop=stop,
            max_new_tokens=self.max_new_tokens,
            logits_processor=[ForceTokens(forced, self.model.end_token_ids)],
        )
        self.transcript_tokens = completion.prompt_tokens + len(forced)
        self.decoded += completion.completion_tokens
        return completion


def run_agents(model, episodes: list, tools_of, agents: int, max_new_tokens: int, together: bool) -> dict:
    """Replay `agents` episode runs, in threads started together or one after another; seconds and counts."""
    model.reset_cache()
    fed, shared = fed_tokens(model), shared_tokens(model)
    runs = [episodes[i % len(episodes)] for i in range(agents)]
    replays = [ForcedReplies(model, e.replies(), max_new_tokens) for e in runs]
    results: list = [None] * agents

    def run(i: int) -> None:
        episode = runs[i]
        agent = Agent(replays[i], tools_of(episode), PROTOCOL, lang=episode.lang, max_turns=len(episode.steps))
        try:
            results[i] = agent.run(episode.question)
        except Exception as e:  # noqa: BLE001  (reported below)
            results[i] = e

    started = time.perf_counter()
    if together:
        threads = [threading.Thread(target=run, args=(i,)) for i in range(agents)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for i in range(agents):
            run(i)
    seconds = time.perf_counter() - started
    for episode, result in zip(runs, results):
        if isinstance(result, Exception) or result.answer != episode.answer:
            raise EpisodeError(
                f"episode {episode.id} did not replay as recorded ({'together' if together else 'alone'})"
                f": {result if isinstance(result, Exception) else repr(result.answer)}"
            )
    return {
        "seconds": round(seconds, 2),
        "tokens_processed": fed_tokens(model) - fed,
        "shared_prefix_tokens": shared_tokens(model) - shared,
        "lower_bound_tokens": sum(r.transcript_tokens for r in replays),
        "decoded": sum(r.decoded for r in replays),
        "longest_agent_decoded": max(r.decoded for r in replays),
    }


def concurrency_report(model, episodes: list, tools_of, agents: int, max_new_tokens: int) -> dict:
    """The `"concurrency"` entry of the benchmark's JSON: sequential vs concurrent on the same model."""
    sizes = batching(model)
    model.generate([{"role": "user", "content": "Hi"}], stop=STOP_WORDS, max_new_tokens=4)  # warm-up
    alone = run_agents(model, episodes, tools_of, agents, max_new_tokens, together=False)
    print(f"  {agents} agents one after another: {alone['seconds']} s", file=sys.stderr)
    passes, stepped = decode_steps(model)
    together = run_agents(model, episodes, tools_of, agents, max_new_tokens, together=True)
    passes, stepped = (after - before for after, before in zip(decode_steps(model), (passes, stepped)))
    print(f"  {agents} agents at once: {together['seconds']} s", file=sys.stderr)
    return {
        "agents": agents,
        "episodes": sorted({episodes[i % len(episodes)].id for i in range(agents)}),
        "sequential_seconds": alone["seconds"],
        "concurrent_seconds": together["seconds"],
        "speedup": round(alone["seconds"] / together["seconds"], 2),
        "tokens_processed": together["tokens_processed"],
        "lower_bound_tokens": together["lower_bound_tokens"],
        "processed_over_lower_bound": round(together["tokens_processed"] / together["lower_bound_tokens"], 3),
        "shared_prefix_tokens": together["shared_prefix_tokens"],
        "sequential_tokens_processed": alone["tokens_processed"],
        "batched_decode_passes": passes,
        **sizes,
        "mean_batch": round(stepped / passes, 2) if passes else None,
        # every agent decodes its replies one token per pass, so no schedule needs fewer passes than this
        "longest_agent_decoded": together["longest_agent_decoded"],
        "decoded": together["decoded"],
        # reply tokens per second of the whole run at once, prefill included
        "decoded_per_s": round(together["decoded"] / together["seconds"], 1),
    }


def print_concurrency(c: dict) -> None:
    print(
        f"\nConcurrency: {c['agents']} agents ({', '.join(c['episodes'])})\n"
        f"  one after another {c['sequential_seconds']:8.2f} s   at once {c['concurrent_seconds']:8.2f} s   "
        f"speedup {c['speedup']:.2f} (target >= 3: {'met' if c['speedup'] >= 3 else 'NOT met'})\n"
        f"  tokens processed {c['tokens_processed']} / lower bound {c['lower_bound_tokens']} = "
        f"{c['processed_over_lower_bound']:.3f} (target <= 1.1: "
        f"{'met' if c['processed_over_lower_bound'] <= 1.1 else 'NOT met'}); "
        f"{c['shared_prefix_tokens']} prompt tokens copied from another agent's kept cache\n"
        f"  {c['batched_decode_passes']} decode passes, {c['mean_batch']} agents each on average; the agent with the "
        f"most reply tokens decoded {c['longest_agent_decoded']} of {c['decoded']}, so no schedule takes fewer "
        f"than {c['longest_agent_decoded']} passes\n"
        f"  {c['decoded_per_s']} reply tokens/s at once, prefill included"
        + (f" (bandwidth bound at this mean batch: {c['bound_decoded_per_s']})" if "bound_decoded_per_s" in c else "")
    )
