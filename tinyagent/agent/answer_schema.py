"""Answers in a schema: a run's final answer read as JSON and checked against a JSON Schema or a pydantic model
(`Agent.run(question, answer_schema=...)`), so a program gets data it can use (`AgentResult.data`).

An answer that does not fit is sent back once with what is wrong (data/prompts/common.yaml `answer_schema`);
on a model with constrained decoding the answer is decoded within the schema (`format.step_format`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..text import clip

#: The most of a validation error the model is shown.
ERROR_CHARS = 300


class AnswerError(ValueError):
    """The answer is not JSON that fits the schema; the message says what, in one line."""


@dataclass(frozen=True)
class AnswerSchema:
    """A JSON Schema (`schema`), and the pydantic model it came from, when it came from one."""

    schema: dict
    model: type | None = None

    @classmethod
    def of(cls, spec) -> AnswerSchema | None:
        """`spec` (a JSON Schema as a dict, a pydantic model class, an AnswerSchema or None) as an AnswerSchema;
        a schema that is not one is a ValueError."""
        if spec is None or isinstance(spec, AnswerSchema):
            return spec
        if isinstance(spec, type) and hasattr(spec, "model_json_schema") and hasattr(spec, "model_validate"):
            return cls(spec.model_json_schema(), spec)
        if not isinstance(spec, dict):
            raise TypeError(
                f"answer_schema must be a JSON Schema (a dict) or a pydantic model, not {type(spec).__name__}"
            )
        from jsonschema import SchemaError, validators  # imported with the first schema: `import tinyagent` stays fast

        try:
            validators.validator_for(spec).check_schema(spec)
        except SchemaError as e:
            raise ValueError(f"answer_schema is not a JSON Schema: {clip(' '.join(e.message.split()), 200)}") from None
        return cls(spec)

    @property
    def text(self) -> str:
        """The schema as compact JSON text (what the prompt shows and constrained decoding compiles)."""
        return json.dumps(self.schema, ensure_ascii=False, separators=(",", ":"))

    def read(self, answer: str):
        """The answer as data: the pydantic model's instance, else the JSON value; AnswerError when it is not
        JSON, or does not fit."""
        value = json_value(answer)
        if self.model is not None:
            from pydantic import ValidationError

            try:
                return self.model.model_validate(value)
            except ValidationError as e:
                first = e.errors()[0]
                where = ".".join(str(p) for p in first.get("loc", ())) or "the answer"
                raise AnswerError(clip(f"{where}: {first.get('msg', 'does not fit')}", ERROR_CHARS)) from None
        from jsonschema import validators

        validator = validators.validator_for(self.schema)(self.schema)
        error = next(iter(sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))), None)
        if error is not None:
            where = ".".join(str(p) for p in error.absolute_path) or "the answer"
            raise AnswerError(clip(f"{where}: {' '.join(error.message.split())}", ERROR_CHARS))
        return value


def json_value(text: str):
    """The JSON value an answer holds: the whole text, else a fenced ```json block, else the text from its first
    `{` or `[` (repaired: a missing bracket, a trailing comma). AnswerError when there is none."""
    text = text.strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    fence = text.find("```")
    if fence >= 0:
        body = text[fence + 3 :].split("```", 1)[0]
        body = body[4:] if body.startswith("json") else body
        try:
            return json.loads(body)
        except ValueError:
            pass
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if starts:
        import json_repair

        value = json_repair.loads(text[min(starts) :])
        if value not in ("", None) or text[min(starts) :].strip() in ("null", '""'):
            return value
    raise AnswerError("the answer is not JSON")
