"""Import paths README documented before the house moved (tinyagent.llm, tinyagent.prompts,
tinyagent.batch) still give the same objects, each with a DeprecationWarning naming the new path."""
from __future__ import annotations

import importlib
import sys

import pytest

from tinyagent import models
from tinyagent.format import examples
from tinyagent.runs import RunItem, run_many


def fresh(name: str):
    sys.modules.pop(name, None)
    return importlib.import_module(name)


@pytest.mark.parametrize("name", ["HFChatModel", "OpenAIChatModel", "InternLM2Chat", "default_model", "BaseModel"])
def test_tinyagent_llm_names_are_the_models_ones(name):
    llm = importlib.import_module("tinyagent.llm")
    with pytest.warns(DeprecationWarning, match=f"import {name} from tinyagent.models"):
        assert getattr(llm, name) is getattr(models, name)


def test_tinyagent_llm_knows_no_other_name():
    with pytest.raises(AttributeError):
        importlib.import_module("tinyagent.llm").packed  # noqa: B018  (the engine moved, not aliased)


def test_tinyagent_prompts_is_the_examples_module():
    with pytest.warns(DeprecationWarning, match="tinyagent.format.examples"):
        old = fresh("tinyagent.prompts")
    assert old.examples_for is examples.examples_for and old.EXAMPLES is examples.EXAMPLES


def test_tinyagent_batch_is_runs():
    with pytest.warns(DeprecationWarning, match="tinyagent.runs"):
        old = fresh("tinyagent.batch")
    assert old.run_many is run_many and old.BatchItem is RunItem
