#!/usr/bin/env python3
"""Write a full-size hybrid GGUF (qwen35 or lfm2) with pseudo-random weights, for speed only.

Usage: python3 bench/make_shape_hybrid.py SHAPE OUT.gguf [--type q8_0|f32]
SHAPE: qwen35-0.8b  24 layers (Gated DeltaNet : gated attention 3 : 1), n_embd 1024, n_ff 3584,
                    attention 8 heads x 256 (2 KV heads, RoPE on 64 dims), DeltaNet 16 key and
                    16 value heads x 128 (state 1 MiB per layer and sequence in F32), conv 4 taps,
                    vocabulary 248320, tied output
       qwen35-2b    24 layers, n_embd 2048, n_ff 6144, otherwise as qwen35-0.8b
       lfm2-1.2b    16 layers (attention at 2, 5, 8, 10, 12, 14; the others short convolutions of
                    3 taps), n_embd 2048, n_ff 8192, 32 heads x 64 (8 KV heads), vocabulary 65536,
                    tied output
The sizes follow the models' published configurations; the weights are int8 quants tiled from a
seeded random pool with one f16 scale per 32-block (Q8_0), norms 1.0, the DeltaNet's A_log and dt
bias set so that the decay stays in (0, 1). Only the speed of such a file means anything. The
format is the GGUF spec's (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md); tensor
names and shapes are those ubatch reads (docs/MODELS.md). Stdlib only; tensors stream to disk.
"""
import argparse
import math
import random
import struct

GGML_F32, GGML_Q8_0 = 0, 8
ALIGN = 32

SHAPES = {
    "qwen35-0.8b": dict(arch="qwen35", n_layer=24, n_embd=1024, n_ff=3584, n_head=8, n_head_kv=2, head_dim=256,
                        n_rot=64, k_heads=16, v_heads=16, d_state=128, conv=4, n_vocab=248320, interval=4,
                        rope=1e7, eps=1e-6),
    "qwen35-2b": dict(arch="qwen35", n_layer=24, n_embd=2048, n_ff=6144, n_head=8, n_head_kv=2, head_dim=256,
                      n_rot=64, k_heads=16, v_heads=16, d_state=128, conv=4, n_vocab=248320, interval=4,
                      rope=1e7, eps=1e-6),
    "lfm2-1.2b": dict(arch="lfm2", n_layer=16, n_embd=2048, n_ff=8192, n_head=32, n_head_kv=8, head_dim=64,
                      attn_layers=[2, 5, 8, 10, 12, 14], l_cache=3, n_vocab=65536, rope=1e6, eps=1e-5),
}


def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv_entry(key, kind, value):
    out = gguf_str(key)
    if kind == "u32":
        out += struct.pack("<II", 4, value)
    elif kind == "f32":
        out += struct.pack("<If", 6, value)
    elif kind == "bool":
        out += struct.pack("<IB", 7, 1 if value else 0)
    elif kind == "str":
        out += struct.pack("<I", 8) + gguf_str(value)
    elif kind == "i32s":
        out += struct.pack("<IIQ", 9, 5, len(value)) + b"".join(struct.pack("<i", v) for v in value)
    elif kind == "f32s":
        out += struct.pack("<IIQ", 9, 6, len(value)) + b"".join(struct.pack("<f", v) for v in value)
    elif kind == "strs":
        out += struct.pack("<IIQ", 9, 8, len(value)) + b"".join(gguf_str(v) for v in value)
    else:
        raise ValueError(kind)
    return out


def tensors_of(s):
    """(name, ne, kind) for every tensor; kind: 'w' weight matrix, 'norm', 'f32' small F32 data."""
    E, V = s["n_embd"], s["n_vocab"]
    t = [("token_embd.weight", [E, V], "w")]
    t.append(("token_embd_norm.weight" if s["arch"] == "lfm2" else "output_norm.weight", [E], "norm"))
    for il in range(s["n_layer"]):
        b = "blk.%d." % il
        t.append((b + "attn_norm.weight", [E], "norm"))
        if s["arch"] == "qwen35":
            recurrent = (il + 1) % s["interval"] != 0
            if recurrent:
                d, hk, hv = s["d_state"], s["k_heads"], s["v_heads"]
                ch = 2 * hk * d + hv * d
                t += [(b + "attn_qkv.weight", [E, ch], "w"), (b + "attn_gate.weight", [E, hv * d], "w"),
                      (b + "ssm_beta.weight", [E, hv], "w"), (b + "ssm_alpha.weight", [E, hv], "w"),
                      (b + "ssm_conv1d.weight", [s["conv"], ch], "f32"), (b + "ssm_dt.bias", [hv], "dt"),
                      (b + "ssm_a", [hv], "a"), (b + "ssm_norm.weight", [d], "norm"),
                      (b + "ssm_out.weight", [hv * d, E], "w")]
            else:
                q = s["n_head"] * s["head_dim"]
                kvw = s["n_head_kv"] * s["head_dim"]
                t += [(b + "attn_q.weight", [E, 2 * q], "w"), (b + "attn_k.weight", [E, kvw], "w"),
                      (b + "attn_v.weight", [E, kvw], "w"), (b + "attn_output.weight", [q, E], "w"),
                      (b + "attn_q_norm.weight", [s["head_dim"]], "norm"),
                      (b + "attn_k_norm.weight", [s["head_dim"]], "norm")]
            t.append((b + "post_attention_norm.weight", [E], "norm"))
        else:
            if il in s["attn_layers"]:
                q = s["n_head"] * s["head_dim"]
                kvw = s["n_head_kv"] * s["head_dim"]
                t += [(b + "attn_q.weight", [E, q], "w"), (b + "attn_k.weight", [E, kvw], "w"),
                      (b + "attn_v.weight", [E, kvw], "w"), (b + "attn_output.weight", [q, E], "w"),
                      (b + "attn_q_norm.weight", [s["head_dim"]], "norm"),
                      (b + "attn_k_norm.weight", [s["head_dim"]], "norm")]
            else:
                t += [(b + "shortconv.in_proj.weight", [E, 3 * E], "w"),
                      (b + "shortconv.conv.weight", [s["l_cache"], E], "f32"),
                      (b + "shortconv.out_proj.weight", [E, E], "w")]
            t.append((b + "ffn_norm.weight", [E], "norm"))
        t += [(b + "ffn_gate.weight", [E, s["n_ff"]], "w"), (b + "ffn_up.weight", [E, s["n_ff"]], "w"),
              (b + "ffn_down.weight", [s["n_ff"], E], "w")]
    return t


def metadata(s, shape, file_type):
    a = s["arch"]
    kv = [("general.architecture", "str", a), ("general.name", "str", "random-" + shape),
          ("general.alignment", "u32", ALIGN), ("general.file_type", "u32", file_type),
          (a + ".context_length", "u32", 32768), (a + ".embedding_length", "u32", s["n_embd"]),
          (a + ".block_count", "u32", s["n_layer"]), (a + ".feed_forward_length", "u32", s["n_ff"]),
          (a + ".attention.head_count", "u32", s["n_head"]),
          (a + ".attention.layer_norm_rms_epsilon", "f32", s["eps"]), (a + ".rope.freq_base", "f32", s["rope"])]
    if a == "qwen35":
        kv += [(a + ".attention.head_count_kv", "u32", s["n_head_kv"]),
               (a + ".attention.key_length", "u32", s["head_dim"]),
               (a + ".attention.value_length", "u32", s["head_dim"]),
               (a + ".rope.dimension_count", "u32", s["n_rot"]),
               (a + ".rope.dimension_sections", "i32s", [s["n_rot"] // 6, s["n_rot"] // 6,
                                                        s["n_rot"] // 2 - 2 * (s["n_rot"] // 6), 0]),
               (a + ".full_attention_interval", "u32", s["interval"]),
               (a + ".ssm.conv_kernel", "u32", s["conv"]), (a + ".ssm.state_size", "u32", s["d_state"]),
               (a + ".ssm.group_count", "u32", s["k_heads"]), (a + ".ssm.time_step_rank", "u32", s["v_heads"]),
               (a + ".ssm.inner_size", "u32", s["v_heads"] * s["d_state"])]
    else:
        kv += [(a + ".attention.head_count_kv", "i32s",
                [s["n_head_kv"] if il in s["attn_layers"] else 0 for il in range(s["n_layer"])]),
               (a + ".shortconv.l_cache", "u32", s["l_cache"])]
    n = s["n_vocab"]
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % i for i in range(256)]
    toks += ["t%d" % i for i in range(n - len(toks))]
    kv += [("tokenizer.ggml.model", "str", "llama"), ("tokenizer.ggml.pre", "str", "default"),
           ("tokenizer.ggml.tokens", "strs", toks), ("tokenizer.ggml.scores", "f32s", [0.0] * n),
           ("tokenizer.ggml.token_type", "i32s", [2, 3, 3] + [6] * 256 + [1] * (n - 259)),
           ("tokenizer.ggml.unknown_token_id", "u32", 0), ("tokenizer.ggml.bos_token_id", "u32", 1),
           ("tokenizer.ggml.eos_token_id", "u32", 2)]
    return kv


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("out")
    ap.add_argument("--type", choices=["q8_0", "f32"], default="q8_0")
    o = ap.parse_args()
    s = SHAPES[o.shape]
    q8 = o.type == "q8_0"
    rng = random.Random(1234)
    # A pool of Q8_0 blocks: scale 2^-9 (f16 0x1800), quants uniform in [-127, 127].
    pool = [struct.pack("<H", 0x1800) + bytes((rng.randint(-127, 127)) & 0xFF for _ in range(32)) for _ in range(4096)]
    pool_bytes = b"".join(pool)
    f32_pool = struct.pack("<4096f", *[rng.uniform(-0.05, 0.05) for _ in range(4096)])

    tensors = tensors_of(s)
    infos, offset, layout = b"", 0, []
    for name, ne, kind in tensors:
        n = math.prod(ne)
        typ = GGML_Q8_0 if (kind == "w" and q8) else GGML_F32
        nbytes = n // 32 * 34 if typ == GGML_Q8_0 else n * 4
        infos += gguf_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", typ, offset)
        layout.append((kind, typ, n, nbytes))
        offset += (nbytes + ALIGN - 1) // ALIGN * ALIGN
    kvs = metadata(s, o.shape, 7 if q8 else 0)
    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kv_entry(*k) for k in kvs) + infos
    with open(o.out, "wb") as f:
        f.write(header)
        f.write(b"\0" * ((ALIGN - len(header) % ALIGN) % ALIGN))
        for i, (kind, typ, n, nbytes) in enumerate(layout):
            if kind == "norm":
                data = struct.pack("<%df" % n, *([1.0] * n))
            elif kind == "a":  # -exp(A_log): decays between about 0.5 and 0.99 per token
                data = struct.pack("<%df" % n, *[-math.exp(rng.uniform(-4.0, 0.0)) for _ in range(n)])
            elif kind == "dt":
                data = struct.pack("<%df" % n, *[rng.uniform(-1.0, 1.0) for _ in range(n)])
            elif typ == GGML_Q8_0:
                start = (i * 7919 % 4096) * 34
                reps = nbytes // len(pool_bytes) + 2
                data = (pool_bytes * reps)[start:start + nbytes] if reps < 4 else None
                if data is None:  # stream large tensors chunk by chunk
                    left = nbytes
                    chunk = pool_bytes[start:] + pool_bytes[:start]
                    while left > 0:
                        f.write(chunk[:min(left, len(chunk))])
                        left -= min(left, len(chunk))
            else:
                reps = nbytes // len(f32_pool) + 1
                data = (f32_pool * reps)[:nbytes]
            if data is not None:
                f.write(data)
            f.write(b"\0" * ((ALIGN - nbytes % ALIGN) % ALIGN))
    print("wrote %s: %s, %d tensors, %.1f MiB of tensor data" % (o.out, o.shape, len(tensors), offset / 1048576))


if __name__ == "__main__":
    main()
