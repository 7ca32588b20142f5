"""vLLM's LLM.generate and LLM.chat options beyond the prompts and parameters, so that code written for vLLM runs:
taken where vt does what they ask (chat's `tools`, handed to the template as its `tools` variable, as vLLM hands
them), taken at the values that ask for nothing (no LoRA adapter, priority 0, no multimodal kwargs, a string content
format), and refused by name otherwise, with nothing queued; never a raw TypeError."""

from __future__ import annotations

import pytest

from tests.helpers import guarding
from vt import LLM, SamplingParams
from vt.errors import RequestError

GREEDY = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
TEMPLATE = ("{% if tools %}{% for t in tools %}[tool {{ t['function']['name'] }}]{% endfor %}{% endif %}"
            "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}")


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM("tiny-qwen3", backend="cpu", max_model_len=256, num_blocks=64)


def test_generate_takes_vllms_options_at_the_values_that_ask_for_nothing(llm: LLM) -> None:
    want = [o.outputs[0].token_ids for o in llm.generate(["Hello", "The cat"], GREEDY, use_tqdm=False)]
    with guarding("vLLM's generate options are taken", TypeError, RequestError):
        got = llm.generate(["Hello", "The cat"], GREEDY, use_tqdm=False, lora_request=None, priority=[0, 0])
    assert [o.outputs[0].token_ids for o in got] == want


@pytest.mark.parametrize("kw, names", [({"lora_request": object()}, "lora_request=.*LoRA adapters are unsupported"),
                                       ({"priority": [1, 0]}, r"priority=\[1, 0\]: priority scheduling is unsupported"),
                                       ({"priority": [0]}, r"priority=\[0\]: expected one int per prompt \(2\)")],
                         ids=["lora", "priority", "priority-length"])
def test_generate_refuses_what_it_cannot_do_by_name_and_queues_nothing(llm: LLM, kw: dict, names: str) -> None:
    with guarding("a typed refusal, not a raw TypeError", TypeError), pytest.raises(RequestError, match=names):
        llm.generate(["Hello", "The cat"], GREEDY, use_tqdm=False, **kw)
    assert not llm.engine.has_unfinished(), "nothing was queued"


def test_chat_hands_its_tools_to_the_template(llm: LLM) -> None:
    messages = [{"role": "user", "content": "weather?"}]
    with guarding("LLM.chat takes vLLM's tools", TypeError):
        out = llm.chat(messages, GREEDY, use_tqdm=False, chat_template=TEMPLATE, tools=TOOLS)[0]
    assert out.prompt.startswith("[tool get_weather]user: weather?"), out.prompt
    plain = llm.chat(messages, GREEDY, use_tqdm=False, chat_template=TEMPLATE)[0]
    assert plain.prompt.startswith("user: weather?"), "non-vacuity: without tools the template writes none"
    with pytest.raises(RequestError, match="tools: given both"):
        llm.chat(messages, GREEDY, use_tqdm=False, chat_template=TEMPLATE, tools=TOOLS,
                 chat_template_kwargs={"tools": TOOLS})


@pytest.mark.parametrize("kw, names", [({"lora_request": object()}, "LoRA adapters are unsupported"),
                                       ({"mm_processor_kwargs": {"fps": 2}}, "mm_processor_kwargs: multimodal"),
                                       ({"chat_template_content_format": "openai"},
                                        "chat_template_content_format='openai'")],
                         ids=["lora", "multimodal", "content-format"])
def test_chat_refuses_what_it_cannot_do_by_name(llm: LLM, kw: dict, names: str) -> None:
    messages = [{"role": "user", "content": "hi"}]
    with guarding("a typed refusal, not a raw TypeError", TypeError), pytest.raises(RequestError, match=names):
        llm.chat(messages, GREEDY, use_tqdm=False, **kw)
    taken = llm.chat(messages, GREEDY, use_tqdm=False, lora_request=None, mm_processor_kwargs={},
                     chat_template_content_format="string")
    assert len(taken[0].outputs[0].token_ids) == 3, "non-vacuity: the values that ask for nothing are taken"
