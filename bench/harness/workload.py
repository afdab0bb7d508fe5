"""Seeded multi-turn agent sessions with tools.

Every session shares one system prompt and one tool list (what a fleet of agents built on one
product looks like, and what a prefix cache exploits). A session is a script of steps; each step
turns the history so far into one chat request:

  user        a new user message (the history grows by it and by the reply)
  tool        the assistant calls a tool and its result comes back: an assistant message with
              tool_calls (the server renders it as DSML) and a `tool` message, then the model
              continues from the result
  regenerate  the previous request again (the user pressed "regenerate"); the new reply replaces
              the old one. Under greedy decoding the two must be identical
  branch      the history is cut back to an earlier turn and continues with a different user
              message (an edited message, a forked conversation)
  cancel      the request is sent as a stream and the client disconnects after a few chunks; the
              reply is not kept

The models tandem generates for tests have random weights and never emit a well-formed tool
call, so tool calls are scripted into the history rather than parsed from replies; the model's
own replies (token salad) are fed back verbatim. Same seed → the same sessions, byte for byte.
"""
import json
import random
from dataclasses import dataclass, field

WORDS = ("river stone cloud lantern pepper orbit violet engine harbor quartz meadow signal "
         "copper falcon tunnel garden winter ladder planet cobalt marble thunder island velvet "
         "anchor spiral ember canyon pixel saddle glacier comet harvest bridge silver mango puzzle "
         "rocket willow cactus beacon tundra oyster kernel nickel").split()

TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file of the repository.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                       "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "run_tests", "description": "Run the test suite matching a pattern.",
        "parameters": {"type": "object", "properties": {"pattern": {"type": "string"},
                                                        "verbose": {"type": "boolean"}}}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the code base.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"},
                                                        "limit": {"type": "integer"}}}}},
]


@dataclass
class Step:
    kind: str                 # user | tool | regenerate | branch | cancel
    text: str = ""            # user message (user, branch, cancel) or tool result (tool)
    tool: str = ""            # tool name (tool)
    arguments: str = ""       # JSON arguments (tool)
    branch_to: int = 0        # branch: keep this many history messages after the system prompt
    max_tokens: int = 16
    cancel_after: int = 0     # cancel: disconnect after this many stream chunks


@dataclass
class Session:
    index: int
    steps: list
    temperature: float = 0.0
    seed: int | None = None
    history: list = field(default_factory=list)  # filled while running


@dataclass
class WorkloadOptions:
    sessions: int = 16
    min_steps: int = 2
    max_steps: int = 5
    min_tokens: int = 8
    max_tokens: int = 24
    system_words: int = 120
    sampled_fraction: float = 0.0   # sessions that sample (seeded) instead of greedy decoding
    cancel_probability: float = 0.1
    tool_probability: float = 0.35
    regenerate_probability: float = 0.1
    branch_probability: float = 0.1


def words(rng, lo, hi):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def system_prompt(seed, n_words):
    """The one system prompt every session of a workload shares."""
    rng = random.Random(f"system-{seed}")
    return "You are a coding agent working in a repository. " + words(rng, n_words, n_words)


def make_step(rng, opt, history_turns):
    max_tokens = rng.randint(opt.min_tokens, opt.max_tokens)
    r = rng.random()
    if history_turns > 0:
        if r < opt.tool_probability:
            tool = rng.choice(TOOLS)["function"]["name"]
            args = {"read_file": {"path": f"src/{rng.choice(WORDS)}.cpp"},
                    "run_tests": {"pattern": rng.choice(WORDS) + "*", "verbose": rng.random() < .5},
                    "search": {"query": words(rng, 1, 3), "limit": rng.randint(1, 20)}}[tool]
            return Step("tool", text=words(rng, 10, 60), tool=tool,
                        arguments=json.dumps(args), max_tokens=max_tokens)
        r -= opt.tool_probability
        if r < opt.regenerate_probability:
            return Step("regenerate", max_tokens=max_tokens)
        r -= opt.regenerate_probability
        if r < opt.branch_probability:
            return Step("branch", text=words(rng, 3, 20), branch_to=rng.randrange(history_turns),
                        max_tokens=max_tokens)
        r -= opt.branch_probability
    if rng.random() < opt.cancel_probability:
        return Step("cancel", text=words(rng, 3, 20), max_tokens=max_tokens,
                    cancel_after=rng.randint(1, 3))
    return Step("user", text=words(rng, 3, 30), max_tokens=max_tokens)


def make_sessions(seed, opt):
    rng = random.Random(seed)
    sessions = []
    for i in range(opt.sessions):
        n = rng.randint(opt.min_steps, opt.max_steps)
        steps, turns = [], 0
        for _ in range(n):
            step = make_step(rng, opt, turns)
            steps.append(step)
            if step.kind != "cancel":
                turns += 1
        sampled = rng.random() < opt.sampled_fraction
        sessions.append(Session(i, steps, temperature=0.8 if sampled else 0.0,
                                seed=seed * 100003 + i if sampled else None))
    return sessions


class Conversation:
    """The history of one session as it runs, and the request body of its next step."""

    def __init__(self, system, session):
        self.system = system
        self.session = session
        self.messages = []      # after the system prompt
        self.turn_ends = []     # len(self.messages) after each kept turn
        self.last_body = None
        self.calls = 0

    def body(self, step, model):
        if step.kind == "regenerate" and self.last_body is not None:
            return self.last_body  # exactly the same request: greedy must answer the same
        if step.kind == "branch":
            keep = self.turn_ends[step.branch_to] if self.turn_ends else 0
            del self.messages[keep:]
            del self.turn_ends[step.branch_to + 1:]
        pending = list(self.messages)
        if step.kind == "tool":
            self.calls += 1
            call_id = f"call_{self.session.index}_{self.calls}"
            pending.append({"role": "assistant", "content": "", "tool_calls": [{
                "id": call_id, "type": "function",
                "function": {"name": step.tool, "arguments": step.arguments}}]})
            pending.append({"role": "tool", "tool_call_id": call_id, "content": step.text})
        else:
            pending.append({"role": "user", "content": step.text})
        body = {"model": model, "messages": [{"role": "system", "content": self.system}] + pending,
                "tools": TOOLS, "max_tokens": step.max_tokens,
                "temperature": self.session.temperature,
                "thinking": {"type": "disabled"}, "logprobs": True,
                "stream": True, "stream_options": {"include_usage": True}}
        if self.session.seed is not None:
            body["seed"] = self.session.seed
        return body

    def commit(self, step, body, reply_text):
        """Keeps what the step added plus the reply (not for a cancelled step)."""
        if step.kind == "cancel":
            return
        if step.kind == "regenerate" and self.last_body is not None:
            # The new reply replaces the previous one.
            self.messages[-1] = {"role": "assistant", "content": reply_text}
            return
        self.messages = body["messages"][1:] + [{"role": "assistant", "content": reply_text}]
        self.turn_ends.append(len(self.messages))
        self.last_body = body
