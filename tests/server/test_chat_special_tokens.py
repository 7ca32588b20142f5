"""A rendered chat prompt is tokenized without the tokenizer's own special tokens, as vLLM tokenizes it: the chat
template writes them. With a tokenizer whose post-processor adds a BOS and a template that opens with
`{{ bos_token }}` (Llama 3's shape), LLM.chat and /v1/chat/completions read [BOS, BOS, ...]. /tokenize with messages
agrees with chat's prompt_tokens, and honours add_special_tokens (default false), as vLLM's TokenizeChatRequest."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

from models.tiny import CHAT_TEMPLATE, ensure
from vt import LLM, SamplingParams
from vt.server.serve import running_server

openai = pytest.importorskip("openai")

BOS = 0  # <|endoftext|> in the tiny tokenizer
MSGS = [{"role": "user", "content": "Hello"}]


@pytest.fixture(scope="module")
def llama3_like(tmp_path_factory) -> str:
    """tiny-qwen3 with a BOS post-processor and a template that writes the BOS itself."""
    from tokenizers import Tokenizer, processors

    src, dest = ensure("tiny-qwen3"), tmp_path_factory.mktemp("llama3-like")
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        shutil.copy(src / name, dest / name)
    tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    tok.post_processor = processors.TemplateProcessing(single="<|endoftext|> $A", pair="<|endoftext|> $A $B",
                                                       special_tokens=[("<|endoftext|>", BOS)])
    tok.save(str(dest / "tokenizer.json"))
    cfg = json.loads((src / "tokenizer_config.json").read_text())
    cfg.update(bos_token="<|endoftext|>", chat_template="{{ bos_token }}" + CHAT_TEMPLATE)
    (dest / "tokenizer_config.json").write_text(json.dumps(cfg))
    return str(dest)


def test_llm_chat_opens_with_one_bos(llama3_like: str) -> None:
    llm = LLM(llama3_like, max_model_len=64, num_blocks=8)
    sp = SamplingParams(temperature=0, max_tokens=1)
    assert llm.generate("Hello", sp)[0].prompt_token_ids[0] == BOS, "non-vacuity: the post-processor adds a BOS"
    out = llm.chat(MSGS, sp)[0]
    assert out.prompt_token_ids[:2] == [BOS, 1], f"one BOS, then <|im_start|>: {out.prompt_token_ids[:4]}"
    assert out.prompt is not None and out.prompt.startswith("<|endoftext|><|im_start|>user"), out.prompt


def test_the_server_tokenizes_a_chat_as_its_template_wrote_it(llama3_like: str) -> None:
    with running_server(llama3_like, max_model_len=64, num_blocks=8) as (_, url):
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        chat = client.chat.completions.create(model=llama3_like, messages=MSGS, max_tokens=1)  # type: ignore
        plain = httpx.post(url + "/tokenize", json={"prompt": "Hello"}, timeout=30).json()["tokens"]
        msgs = httpx.post(url + "/tokenize", json={"messages": MSGS}, timeout=30).json()["tokens"]
        added = httpx.post(url + "/tokenize", json={"messages": MSGS, "add_special_tokens": True}, timeout=30).json()
    assert plain[0] == BOS, "non-vacuity: a plain prompt gets the post-processor's BOS"
    assert msgs[:2] == [BOS, 1], f"/tokenize with messages: one BOS ({msgs[:4]})"
    assert chat.usage.prompt_tokens == len(msgs), "chat's prompt is /tokenize's"
    assert added["tokens"] == [BOS, *msgs], "add_special_tokens with messages is honoured: the post-processor's BOS"
