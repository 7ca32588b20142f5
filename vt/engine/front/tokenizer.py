"""The tokenizer `LLM.get_tokenizer()` hands out: the methods transformers users call (encode, decode, __call__,
apply_chat_template, batch_decode, the special tokens' ids), over the checkpoint's `tokenizers` object and its
chat template, rendered as the engine renders it. `backend_tokenizer` is the raw object, as transformers
names it."""

from __future__ import annotations

from typing import Any


class Tokenizer:
    def __init__(self, backend: Any, chat_template: str | None, special_tokens: dict[str, str]) -> None:
        self.backend_tokenizer = backend
        self.chat_template = chat_template
        self.special_tokens = special_tokens  # bos_token, eos_token, ... as tokenizer_config.json names them

    # ---- text <-> ids -------------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, token_ids: Any, skip_special_tokens: bool = False) -> str:
        ids = [token_ids] if isinstance(token_ids, int) else [int(t) for t in token_ids]
        return self.backend_tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def batch_decode(self, sequences: Any, skip_special_tokens: bool = False) -> list[str]:
        return [self.decode(s, skip_special_tokens) for s in sequences]

    def __call__(self, text: str | list[str], add_special_tokens: bool = True) -> dict[str, Any]:
        if isinstance(text, str):
            return {"input_ids": self.encode(text, add_special_tokens)}
        return {"input_ids": [self.encode(t, add_special_tokens) for t in text]}

    def convert_ids_to_tokens(self, ids: int | list[int]) -> str | list[str | None] | None:
        if isinstance(ids, int):
            return self.backend_tokenizer.id_to_token(ids)
        return [self.backend_tokenizer.id_to_token(i) for i in ids]

    def convert_tokens_to_ids(self, tokens: str | list[str]) -> int | list[int | None] | None:
        if isinstance(tokens, str):
            return self.backend_tokenizer.token_to_id(tokens)
        return [self.backend_tokenizer.token_to_id(t) for t in tokens]

    # ---- chat ---------------------------------------------------------------------------------
    def apply_chat_template(self, conversation: Any, tokenize: bool = True, add_generation_prompt: bool = False,
                            chat_template: str | None = None, return_dict: bool = True) -> Any:
        """transformers 5's defaults: tokenized, as {input_ids, attention_mask} (return_dict=False: the ids alone);
        no generation prompt unless asked; tokenize=False: the rendered text."""
        from vt.engine.front.chat import render

        text = render(chat_template or self.chat_template, conversation, self.special_tokens, add_generation_prompt)
        if not tokenize:
            return text
        ids = self.encode(text, add_special_tokens=False)
        return {"input_ids": ids, "attention_mask": [1] * len(ids)} if return_dict else ids

    # ---- vocabulary and special tokens --------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """The base vocabulary, added tokens apart (transformers' meaning); len() counts them."""
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=False)

    def __len__(self) -> int:
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=True)

    def get_vocab(self) -> dict[str, int]:
        return dict(self.backend_tokenizer.get_vocab(with_added_tokens=True))

    def _special_id(self, name: str) -> int | None:
        tok = self.special_tokens.get(name)
        return None if tok is None else self.backend_tokenizer.token_to_id(tok)

    @property
    def eos_token(self) -> str | None:
        return self.special_tokens.get("eos_token")

    @property
    def eos_token_id(self) -> int | None:
        return self._special_id("eos_token")

    @property
    def bos_token_id(self) -> int | None:
        return self._special_id("bos_token")

    @property
    def pad_token_id(self) -> int | None:
        return self._special_id("pad_token")
