#!/usr/bin/python3
"""The PyTorch twin of strata's Llama (src/model/llama.hpp), written as Hugging Face's
LlamaForCausalLM computes it, with its parameter names (`model.layers.3.self_attn.q_proj.weight`):
RMSNorm (eps 1e-5), rotary embeddings over the two halves of each head (rotate_half),
grouped-query causal attention, SwiGLU MLP, no biases, an untied LM head over the padded
vocabulary whose padded logits take no part in the loss. The float64 reference of
tests/peers; bench/torch_gpt.py builds it for `--model llama-*` (import only; torch is
imported by the caller's build_model).
"""
import math

# Shapes of strata's Llama presets (src/model/config.cpp), fields as in ModelConfig::to_json().
PRESETS = {
    "llama-tiny": dict(n_layer=2, n_head=4, n_kv_head=2, n_embd=64, seq_len=64, vocab_size=256,
                       padded_vocab_size=256, ffn_hidden=0),
    "llama-small": dict(n_layer=6, n_head=6, n_kv_head=2, n_embd=384, seq_len=256, vocab_size=256,
                        padded_vocab_size=256, ffn_hidden=0),
}


def ffn_size(cfg):
    """ModelConfig::ffn_size: Llama's 8/3 n_embd rounded up to a multiple of 256 unless given."""
    if cfg.get("ffn_hidden", 0) > 0:
        return cfg["ffn_hidden"]
    hidden = 2 * (4 * cfg["n_embd"]) // 3
    return (hidden + 255) // 256 * 256


def build_model(torch, cfg):
    nn = torch.nn
    F = torch.nn.functional
    C, nh = cfg["n_embd"], cfg["n_head"]
    nkv = cfg.get("n_kv_head", 0) or nh
    hd = C // nh
    theta = cfg.get("rope_theta", 10000.0)

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(C))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight

    def rotate_half(x):
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return torch.cat((-x2, x1), dim=-1)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = nn.Linear(C, nh * hd, bias=False)
            self.k_proj = nn.Linear(C, nkv * hd, bias=False)
            self.v_proj = nn.Linear(C, nkv * hd, bias=False)
            self.o_proj = nn.Linear(C, C, bias=False)
            self.future = torch.ones(cfg["seq_len"], cfg["seq_len"], dtype=torch.bool).triu(1)

        def forward(self, x, cos, sin):
            B, T, _ = x.shape
            q = self.q_proj(x).view(B, T, nh, hd).transpose(1, 2)
            k = self.k_proj(x).view(B, T, nkv, hd).transpose(1, 2)
            v = self.v_proj(x).view(B, T, nkv, hd).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k = k.repeat_interleave(nh // nkv, dim=1)  # HF's repeat_kv
            v = v.repeat_interleave(nh // nkv, dim=1)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            att = att.masked_fill(self.future[:T, :T], float("-inf")).softmax(dim=-1)
            return self.o_proj((att @ v).transpose(1, 2).reshape(B, T, C))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            f = ffn_size(cfg)
            self.gate_proj = nn.Linear(C, f, bias=False)
            self.up_proj = nn.Linear(C, f, bias=False)
            self.down_proj = nn.Linear(f, C, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = RMSNorm()
            self.self_attn = Attention()
            self.post_attention_layernorm = RMSNorm()
            self.mlp = MLP()

        def forward(self, x, cos, sin):
            x = x + self.self_attn(self.input_layernorm(x), cos, sin)
            return x + self.mlp(self.post_attention_layernorm(x))

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(cfg["padded_vocab_size"], C)
            self.layers = nn.ModuleList([Layer() for _ in range(cfg["n_layer"])])
            self.norm = RMSNorm()

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.cfg = dict(cfg)
            self.model = Decoder()
            self.lm_head = nn.Linear(C, cfg["padded_vocab_size"], bias=False)
            self.logits = None

        def forward(self, idx, targets):
            B, T = idx.shape
            dtype = self.lm_head.weight.dtype
            inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
            angles = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
            angles = torch.cat((angles, angles), dim=-1)
            cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
            x = self.model.embed_tokens(idx)
            for layer in self.model.layers:
                x = layer(x, cos, sin)
            logits = self.lm_head(self.model.norm(x))
            self.logits = logits
            V = self.cfg["vocab_size"]
            real = logits if V == logits.shape[-1] else logits[..., :V]
            return F.cross_entropy(real.reshape(B * T, V), targets.reshape(B * T))

    return Llama()
