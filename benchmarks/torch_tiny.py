"""tiny-qwen3's decode-step shape as plain torch (static KV cache), for the CUDAGraph anchor."""

from __future__ import annotations

from typing import Any


class TorchTinyQwen3:
    def __init__(self, batch: int, ctx: int = 64, layers: int = 4, hidden: int = 64, heads: int = 4,
                 kv_heads: int = 2, head_dim: int = 16, inter: int = 192, vocab: int = 512) -> None:
        import torch

        self.t = torch
        dev, f = "cuda", torch.float32
        r = lambda *s: torch.randn(*s, device=dev, dtype=f) * 0.1  # noqa: E731
        self.B, self.ctx, self.nh, self.nkv, self.hd = batch, ctx, heads, kv_heads, head_dim
        self.embed, self.lm_head = r(vocab, hidden), r(hidden, vocab)
        self.layers = [dict(ln1=r(hidden), ln2=r(hidden), qkv=r(hidden, (heads + 2 * kv_heads) * head_dim),
                            qn=r(head_dim), kn=r(head_dim), o=r(heads * head_dim, hidden), gu=r(hidden, 2 * inter),
                            down=r(inter, hidden),
                            k=torch.zeros(batch, ctx, kv_heads, head_dim, device=dev),
                            v=torch.zeros(batch, ctx, kv_heads, head_dim, device=dev)) for _ in range(layers)]
        self.norm = r(hidden)
        self.tokens = torch.zeros(batch, dtype=torch.long, device=dev)
        self.pos = torch.full((batch,), ctx // 2, dtype=torch.long, device=dev)
        inv = 1.0 / (1e6 ** (torch.arange(0, head_dim, 2, device=dev, dtype=f) / head_dim))
        ang = torch.outer(torch.arange(ctx, device=dev, dtype=f), inv)
        self.cos, self.sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
        self.logits = torch.zeros(batch, vocab, device=dev)

    def _rms(self, x: Any, w: Any) -> Any:
        return w * (x * self.t.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))

    def _rope(self, x: Any) -> Any:
        c, s = self.cos[self.pos][:, None], self.sin[self.pos][:, None]
        h = x.shape[-1] // 2
        return x * c + self.t.cat([-x[..., h:], x[..., :h]], -1) * s

    def step(self) -> None:
        t, B, nh, nkv, hd = self.t, self.B, self.nh, self.nkv, self.hd
        x = self.embed[self.tokens]
        ar = t.arange(B, device=x.device)
        for L in self.layers:
            h = self._rms(x, L["ln1"])
            qkv = h @ L["qkv"]
            q = self._rope(self._rms(qkv[:, : nh * hd].view(B, nh, hd), L["qn"]))
            k = self._rope(self._rms(qkv[:, nh * hd : (nh + nkv) * hd].view(B, nkv, hd), L["kn"]))
            L["k"][ar, self.pos] = k
            L["v"][ar, self.pos] = qkv[:, (nh + nkv) * hd :].view(B, nkv, hd)
            qg = q.view(B, nkv, nh // nkv, hd)
            sc = t.einsum("bkgd,blkd->bkgl", qg, L["k"]) * hd**-0.5
            mask = t.arange(self.ctx, device=x.device)[None, :] <= self.pos[:, None]
            p = t.softmax(sc.masked_fill(~mask[:, None, None, :], float("-inf")), -1)
            a = t.einsum("bkgl,blkd->bkgd", p, L["v"]).reshape(B, nh * hd)
            x = x + a @ L["o"]
            gu = self._rms(x, L["ln2"]) @ L["gu"]
            g, u = gu.chunk(2, -1)
            x = x + (t.nn.functional.silu(g) * u) @ L["down"]
        self.logits.copy_(self._rms(x, self.norm) @ self.lm_head)


class TorchTinyQwen3Fused(TorchTinyQwen3):
    """The same step as a torch user would write it with torch's fused ops: F.rms_norm,
    F.scaled_dot_product_attention (GQA), F.silu. The leaner anchor (fewer, fused kernels)."""

    def _rms(self, x: Any, w: Any) -> Any:
        return self.t.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6)

    def step(self) -> None:
        t, B, nh, nkv, hd = self.t, self.B, self.nh, self.nkv, self.hd
        F = t.nn.functional
        x = self.embed[self.tokens]
        ar = t.arange(B, device=x.device)
        mask = (t.arange(self.ctx, device=x.device)[None, :] <= self.pos[:, None])[:, None, None, :]
        for L in self.layers:
            qkv = self._rms(x, L["ln1"]) @ L["qkv"]
            q = self._rope(self._rms(qkv[:, : nh * hd].view(B, nh, hd), L["qn"]))
            k = self._rope(self._rms(qkv[:, nh * hd : (nh + nkv) * hd].view(B, nkv, hd), L["kn"]))
            L["k"][ar, self.pos] = k
            L["v"][ar, self.pos] = qkv[:, (nh + nkv) * hd :].view(B, nkv, hd)
            a = F.scaled_dot_product_attention(q[:, :, None], L["k"].transpose(1, 2), L["v"].transpose(1, 2),
                                               attn_mask=mask, enable_gqa=True)
            x = x + a.reshape(B, nh * hd) @ L["o"]
            g, u = (self._rms(x, L["ln2"]) @ L["gu"]).chunk(2, -1)
            x = x + (F.silu(g) * u) @ L["down"]
        self.logits.copy_(self._rms(x, self.norm) @ self.lm_head)
