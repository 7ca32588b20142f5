"""Detokenization where it costs the engine nothing (issue 28, vLLM's split): through the engine process, the
front makes the text of every request without stop strings from its ids and asks the core for none, so the
core's steps never decode; a request with stop strings is detokenized by the core, which finds them in the
text. `detokenize=False` (vLLM's field) gives token ids and no text, and is refused beside stop strings.
(That the text equals the in-process engine's, byte for byte, is tests/server/test_engine_process.py's.)"""

from __future__ import annotations

from typing import Any

import pytest

from models.loader import load_checkpoint, resolve_model
from vt import LLM, SamplingParams
from vt.engine.core.proc import EngineCoreClient, _Output, _params_from_wire
from vt.errors import ConfigError

TOK = load_checkpoint(resolve_model("tiny-qwen3")).tokenizer


def _client() -> tuple[Any, list[tuple]]:
    """The front's end of the pipe without a core process: what it sends is recorded."""
    sent: list[tuple] = []
    client = EngineCoreClient.__new__(EngineCoreClient)
    client.tokenizer, client.outputs, client.send = TOK, {}, sent.append
    return client, sent


def test_the_core_is_asked_for_text_only_where_stop_strings_need_it() -> None:
    client, sent = _client()
    client.add("plain", None, [5, 6], SamplingParams(max_tokens=8))
    client.add("stops", None, [5, 6], SamplingParams(max_tokens=8, stop=["ab"]))
    wire = {msg[1]: _params_from_wire(msg[3]) for msg in sent}
    assert wire["plain"].detokenize is False, "a request without stop strings: the core sends ids only"
    assert wire["stops"].detokenize is True and wire["stops"].stop == ["ab"], "stop strings: the core's text"
    assert client.outputs["plain"].tokenizer is TOK and client.outputs["stops"].tokenizer is None


def test_the_front_makes_the_text_the_core_did_not_send() -> None:
    ids = TOK.encode("the engine schedules é€ steps").ids
    out = _Output(None, [5, 6], tokenizer=TOK)
    cut = len(ids) // 2  # two steps' deltas, as the core sends them for a request asked for no text
    first = out.apply(["r", False, None, 0.0, None, None, 0, None, [(0, ids[:cut], 0, "", None, None, None, None)],
                       0])
    last = out.apply(["r", True, None, 0.0, None, None, 0, None, [(0, ids[cut:], 0, "", None, None, "length", None)],
                      0])
    whole = TOK.decode(ids, skip_special_tokens=True)
    assert whole.startswith(first.outputs[0].text) and first.outputs[0].text, "a partial text, a prefix of it"
    assert last.outputs[0].text == whole and last.outputs[0].token_ids == ids, "the whole text from the ids alone"


def test_detokenize_false_gives_the_same_tokens_and_no_text() -> None:
    llm = LLM("tiny-qwen3", backend="cpu", max_model_len=128, num_blocks=64)
    base = dict(temperature=0.8, seed=5, max_tokens=12, ignore_eos=True)
    with_text, ids_only = (llm.generate(["hello world"], SamplingParams(**base, detokenize=d))[0].outputs[0]
                           for d in (True, False))
    assert ids_only.token_ids == with_text.token_ids, "the same draws"
    assert ids_only.text == "" and with_text.text, "no text where none was asked (non-vacuity: there is some)"
    with pytest.raises(ConfigError, match="detokenize"):
        SamplingParams(stop=["x"], detokenize=False)


def test_a_front_that_fails_on_the_engines_output_says_so_instead_of_a_silent_reader() -> None:
    """Whatever the front's reader meets in the core's output (here an output it cannot apply), it fails every
    request in flight through the owner, as a dead core does: never a reader thread that ends quietly while
    streams wait for it."""
    import multiprocessing
    import queue
    import threading

    from vt.engine.core.proc import _send

    class Owner:
        num_steps, died, delivered = 0, None, 0

        def deliver_outputs(self, outs: list) -> None:
            self.delivered += len(outs)

        def die(self, e: BaseException) -> None:
            self.died = e

    class Broken(_Output):
        def apply(self, item: list) -> Any:
            raise ValueError("an output this front cannot apply")

    mine, core = multiprocessing.Pipe(duplex=True)
    client = EngineCoreClient.__new__(EngineCoreClient)
    client.owner, client.conn, client.stats, client._resets = Owner(), mine, {}, queue.Queue()
    client.outputs = {"ok": _Output(None, [5], tokenizer=TOK), "bad": Broken(None, [5])}
    reader = threading.Thread(target=client._read, daemon=True)
    reader.start()
    item = ["ok", False, None, 0.0, None, None, 0, None, [(0, [7], 0, "", None, None, None, None)], 0]
    _send(core, ("out", 1, {}, [item], []))
    _send(core, ("out", 2, {}, [["bad", *item[1:]]], []))
    reader.join(5)
    assert client.owner.delivered == 1, "non-vacuity: the reader delivered the output it could apply"
    assert not reader.is_alive() and client.owner.died is not None, "the reader ended and said why"
    assert client._resets.get_nowait() is None, "a prefix-cache reset waiting on the core is woken too"
    assert "cannot apply" in str(client.owner.died), client.owner.died
