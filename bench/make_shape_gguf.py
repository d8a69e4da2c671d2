#!/usr/bin/env python3
"""Write a GGUF of a real model's shape with seeded pseudo-random weights, for speed only.

Usage: python3 bench/make_shape_gguf.py SHAPE OUT.gguf [--type TYPE] [--layers N] [--seed S]

SHAPE (the sizes follow each model's published configuration):
  llama2-7b      LLaMA-2-7B: 32 layers, n_embd 4096, n_ff 11008, 32 heads (MHA), vocabulary 32000
  llama3.2-1b    Llama-3.2-1B: 16 layers, n_embd 2048, n_ff 8192, 32 heads (8 KV), vocab 128256, tied
  llama3.2-3b    Llama-3.2-3B: 28 layers, n_embd 3072, n_ff 8192, 24 heads (8 KV), vocab 128256, tied
  qwen2.5-1.5b   Qwen2.5-1.5B: 28 layers, n_embd 1536, n_ff 8960, 12 heads (2 KV), Q/K/V biases, tied
  qwen35-0.8b    Qwen3.5-0.8B: 24 layers (Gated DeltaNet : gated attention 3 : 1), n_embd 1024
  qwen35-2b      Qwen3.5-2B: as qwen35-0.8b with n_embd 2048, n_ff 6144
  lfm2-1.2b      LFM2-1.2B: 16 layers (6 GQA attention, 10 short convolutions), n_embd 2048
  qwen3-30b-a3b  Qwen3-30B-A3B: 48 layers, n_embd 2048, 128 experts (8 used) of width 768
  gpt-oss-20b    gpt-oss-20b: 24 layers, n_embd 2880, 32 experts (4 used) in MXFP4, sinks, SWA 128

TYPE: the type of the weight matrices (norms, biases, conv taps and small vectors stay F32):
  q4_0, q8_0, q4_k, f32, or q4_k_m (Q4_K, with Q6_K for the output matrix and for attn_v and
  ffn_down in the first and last eighth of the layers and every third one between, the mix of
  the common Q4_K_M files). A k-quant needs rows that are a multiple of 256 values; other rows
  are written in Q8_0. gpt-oss's experts are MXFP4 whatever the type, as in the released model.
--layers N keeps the first N layers (for a machine whose memory cannot hold the whole model;
  say so where the numbers are reported).

Every block is valid: quants from a seeded random pool, one fixed power-of-two scale per block
(so no value is NaN or infinite and activations stay bounded), norms 1.0, the DeltaNet's decay
parameters chosen so that the decay stays in (0, 1). Only the speed of such a file means
anything; its text is noise. The block layouts are the GGUF format's (ggml's docs/gguf.md and
the quantization types' definitions); tensor names and shapes are those docs/MODELS.md lists.
Stdlib only; tensors stream to disk (a 7B Q4_K_M file takes about a minute).
"""
import argparse
import math
import random
import struct

ALIGN = 32
# GGML type ids, block size (values), bytes per block.
TYPES = {"f32": (0, 1, 4), "q4_0": (2, 32, 18), "q8_0": (8, 32, 34), "q4_k": (12, 256, 144),
         "q6_k": (14, 256, 210), "mxfp4": (39, 32, 17)}
FILE_TYPE = {"f32": 0, "q4_0": 2, "q8_0": 7, "q4_k": 14, "q4_k_m": 15}

DENSE = dict(kind="dense", bias=False, tied=False, ctx=4096, eps=1e-5)
SHAPES = {
    "llama2-7b": dict(DENSE, arch="llama", n_layer=32, n_embd=4096, n_ff=11008, n_head=32, n_head_kv=32,
                      head_dim=128, n_vocab=32000, rope=1e4),
    "llama3.2-1b": dict(DENSE, arch="llama", n_layer=16, n_embd=2048, n_ff=8192, n_head=32, n_head_kv=8,
                        head_dim=64, n_vocab=128256, rope=5e5, tied=True, ctx=131072),
    "llama3.2-3b": dict(DENSE, arch="llama", n_layer=28, n_embd=3072, n_ff=8192, n_head=24, n_head_kv=8,
                        head_dim=128, n_vocab=128256, rope=5e5, tied=True, ctx=131072),
    "qwen2.5-1.5b": dict(DENSE, arch="qwen2", n_layer=28, n_embd=1536, n_ff=8960, n_head=12, n_head_kv=2,
                         head_dim=128, n_vocab=151936, rope=1e6, eps=1e-6, bias=True, tied=True, ctx=32768),
    "qwen35-0.8b": dict(kind="qwen35", arch="qwen35", n_layer=24, n_embd=1024, n_ff=3584, n_head=8, n_head_kv=2,
                        head_dim=256, n_rot=64, k_heads=16, v_heads=16, d_state=128, conv=4, n_vocab=248320,
                        interval=4, rope=1e7, eps=1e-6, tied=True, ctx=32768),
    "qwen35-2b": dict(kind="qwen35", arch="qwen35", n_layer=24, n_embd=2048, n_ff=6144, n_head=8, n_head_kv=2,
                      head_dim=256, n_rot=64, k_heads=16, v_heads=16, d_state=128, conv=4, n_vocab=248320,
                      interval=4, rope=1e7, eps=1e-6, tied=True, ctx=32768),
    "lfm2-1.2b": dict(kind="lfm2", arch="lfm2", n_layer=16, n_embd=2048, n_ff=8192, n_head=32, n_head_kv=8,
                      head_dim=64, attn_layers=[2, 5, 8, 10, 12, 14], l_cache=3, n_vocab=65536, rope=1e6,
                      eps=1e-5, tied=True, ctx=32768),
    "qwen3-30b-a3b": dict(kind="moe", arch="qwen3moe", n_layer=48, n_embd=2048, n_ff=6144, n_head=32, n_head_kv=4,
                          head_dim=128, n_expert=128, n_expert_used=8, expert_ff=768, n_vocab=151936, rope=1e6,
                          eps=1e-6, tied=False, ctx=40960),
    "gpt-oss-20b": dict(kind="moe", arch="gpt-oss", n_layer=24, n_embd=2880, n_ff=2880, n_head=64, n_head_kv=8,
                        head_dim=64, n_expert=32, n_expert_used=4, expert_ff=2880, n_vocab=201088, rope=1.5e5,
                        eps=1e-5, tied=False, ctx=131072, window=128, yarn_factor=32.0, yarn_orig=4096),
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
    elif kind == "str":
        out += struct.pack("<I", 8) + gguf_str(value)
    elif kind == "i32s":
        out += struct.pack("<IIQ", 9, 5, len(value)) + b"".join(struct.pack("<i", v) for v in value)
    elif kind == "f32s":
        out += struct.pack("<IIQ", 9, 6, len(value)) + struct.pack("<%df" % len(value), *value)
    elif kind == "strs":
        out += struct.pack("<IIQ", 9, 8, len(value)) + b"".join(gguf_str(v) for v in value)
    else:
        raise ValueError(kind)
    return out


def attention_tensors(b, s, q_rows, biases=False, qk_norm=False):
    E, kvw = s["n_embd"], s["n_head_kv"] * s["head_dim"]
    q = s["n_head"] * s["head_dim"]
    t = [(b + "attn_q.weight", [E, q_rows], "w"), (b + "attn_k.weight", [E, kvw], "w"),
         (b + "attn_v.weight", [E, kvw], "w"), (b + "attn_output.weight", [q, E], "w")]
    if biases:
        t += [(b + "attn_q.bias", [q_rows], "f32"), (b + "attn_k.bias", [kvw], "f32"), (b + "attn_v.bias", [kvw], "f32")]
    if qk_norm:
        t += [(b + "attn_q_norm.weight", [s["head_dim"]], "norm"), (b + "attn_k_norm.weight", [s["head_dim"]], "norm")]
    return t


def dense_ffn(b, s):
    E, F = s["n_embd"], s["n_ff"]
    return [(b + "ffn_gate.weight", [E, F], "w"), (b + "ffn_up.weight", [E, F], "w"), (b + "ffn_down.weight", [F, E], "w")]


def tensors_of(s):
    """(name, ne, kind) for every tensor; kind: 'w' matrix, 'x' expert matrices, 'norm', 'f32',
    'a' (DeltaNet decay), 'dt' (DeltaNet time-step bias)."""
    E, V = s["n_embd"], s["n_vocab"]
    t = [("token_embd.weight", [E, V], "w")]
    t.append(("token_embd_norm.weight" if s["kind"] == "lfm2" else "output_norm.weight", [E], "norm"))
    if not s["tied"]:
        t.append(("output.weight", [E, V], "w"))
    for il in range(s["n_layer"]):
        b = "blk.%d." % il
        t.append((b + "attn_norm.weight", [E], "norm"))
        if s["kind"] == "dense":
            t += attention_tensors(b, s, s["n_head"] * s["head_dim"], biases=s["bias"])
            t.append((b + "ffn_norm.weight", [E], "norm"))
            t += dense_ffn(b, s)
        elif s["kind"] == "qwen35":
            if (il + 1) % s["interval"] != 0:
                d, hk, hv = s["d_state"], s["k_heads"], s["v_heads"]
                ch = 2 * hk * d + hv * d
                t += [(b + "attn_qkv.weight", [E, ch], "w"), (b + "attn_gate.weight", [E, hv * d], "w"),
                      (b + "ssm_beta.weight", [E, hv], "w"), (b + "ssm_alpha.weight", [E, hv], "w"),
                      (b + "ssm_conv1d.weight", [s["conv"], ch], "f32"), (b + "ssm_dt.bias", [hv], "dt"),
                      (b + "ssm_a", [hv], "a"), (b + "ssm_norm.weight", [d], "norm"),
                      (b + "ssm_out.weight", [hv * d, E], "w")]
            else:
                t += attention_tensors(b, s, 2 * s["n_head"] * s["head_dim"], qk_norm=True)
            t.append((b + "post_attention_norm.weight", [E], "norm"))
            t += dense_ffn(b, s)
        elif s["kind"] == "lfm2":
            if il in s["attn_layers"]:
                t += attention_tensors(b, s, s["n_head"] * s["head_dim"], qk_norm=True)
            else:
                t += [(b + "shortconv.in_proj.weight", [E, 3 * E], "w"),
                      (b + "shortconv.conv.weight", [s["l_cache"], E], "f32"),
                      (b + "shortconv.out_proj.weight", [E, E], "w")]
            t.append((b + "ffn_norm.weight", [E], "norm"))
            t += dense_ffn(b, s)
        else:  # mixture of experts
            oss = s["arch"] == "gpt-oss"
            X, F = s["n_expert"], s["expert_ff"]
            t += attention_tensors(b, s, s["n_head"] * s["head_dim"], biases=oss, qk_norm=not oss)
            if oss:
                t += [(b + "attn_output.bias", [E], "f32"), (b + "attn_sinks.weight", [s["n_head"]], "f32")]
            t.append((b + ("post_attention_norm.weight" if oss else "ffn_norm.weight"), [E], "norm"))
            t += [(b + "ffn_gate_inp.weight", [E, X], "f32"), (b + "ffn_gate_exps.weight", [E, F, X], "x"),
                  (b + "ffn_up_exps.weight", [E, F, X], "x"), (b + "ffn_down_exps.weight", [F, E, X], "x")]
            if oss:
                t += [(b + "ffn_gate_inp.bias", [X], "f32"), (b + "ffn_gate_exps.bias", [F, X], "f32"),
                      (b + "ffn_up_exps.bias", [F, X], "f32"), (b + "ffn_down_exps.bias", [E, X], "f32")]
    return t


def more_bits(il, n_layer):
    """The layers whose attn_v and ffn_down a Q4_K_M file keeps in Q6_K."""
    return il < n_layer // 8 or il >= 7 * n_layer // 8 or (il - n_layer // 8) % 3 == 2


def tensor_type(name, ne, kind, s, wtype):
    if kind in ("norm", "f32", "a", "dt"):
        return "f32"
    if kind == "x" and s["arch"] == "gpt-oss":
        return "mxfp4"
    t = wtype
    if wtype == "q4_k_m":
        t = "q4_k"
        last_matrix = name == "output.weight" or (s["tied"] and name == "token_embd.weight")
        if last_matrix:
            t = "q6_k"
        elif name.startswith("blk.") and name.split(".")[2] in ("attn_v", "ffn_down", "ffn_down_exps"):
            if more_bits(int(name.split(".")[1]), s["n_layer"]):
                t = "q6_k"
    if ne[0] % TYPES[t][1] != 0:
        t = "q8_0"
    return t


def metadata(s, shape, wtype):
    a = s["arch"]
    kv = [("general.architecture", "str", a), ("general.name", "str", "random-" + shape),
          ("general.alignment", "u32", ALIGN),
          ("general.file_type", "u32", 38 if a == "gpt-oss" else FILE_TYPE[wtype]),  # 38: MXFP4 experts
          ("general.quantization_version", "u32", 2),
          (a + ".context_length", "u32", s["ctx"]), (a + ".embedding_length", "u32", s["n_embd"]),
          (a + ".block_count", "u32", s["n_layer"]), (a + ".feed_forward_length", "u32", s["n_ff"]),
          (a + ".attention.head_count", "u32", s["n_head"]),
          (a + ".attention.layer_norm_rms_epsilon", "f32", s["eps"]), (a + ".rope.freq_base", "f32", s["rope"])]
    if s["kind"] == "lfm2":
        kv += [(a + ".attention.head_count_kv", "i32s",
                [s["n_head_kv"] if il in s["attn_layers"] else 0 for il in range(s["n_layer"])]),
               (a + ".shortconv.l_cache", "u32", s["l_cache"])]
    else:
        kv.append((a + ".attention.head_count_kv", "u32", s["n_head_kv"]))
    if s["kind"] == "dense":
        kv.append((a + ".rope.dimension_count", "u32", s["head_dim"]))
    if s["kind"] in ("qwen35", "moe"):
        kv += [(a + ".attention.key_length", "u32", s["head_dim"]),
               (a + ".attention.value_length", "u32", s["head_dim"])]
    if s["kind"] == "qwen35":
        r = s["n_rot"]
        kv += [(a + ".rope.dimension_count", "u32", r),
               (a + ".rope.dimension_sections", "i32s", [r // 6, r // 6, r // 2 - 2 * (r // 6), 0]),
               (a + ".full_attention_interval", "u32", s["interval"]),
               (a + ".ssm.conv_kernel", "u32", s["conv"]), (a + ".ssm.state_size", "u32", s["d_state"]),
               (a + ".ssm.group_count", "u32", s["k_heads"]), (a + ".ssm.time_step_rank", "u32", s["v_heads"]),
               (a + ".ssm.inner_size", "u32", s["v_heads"] * s["d_state"])]
    if s["kind"] == "moe":
        kv += [(a + ".expert_count", "u32", s["n_expert"]), (a + ".expert_used_count", "u32", s["n_expert_used"]),
               (a + ".expert_feed_forward_length", "u32", s["expert_ff"])]
    if a == "gpt-oss":
        kv += [(a + ".attention.sliding_window", "u32", s["window"]), (a + ".rope.scaling.type", "str", "yarn"),
               (a + ".rope.scaling.factor", "f32", s["yarn_factor"]),
               (a + ".rope.scaling.original_context_length", "u32", s["yarn_orig"])]
    n = s["n_vocab"]
    toks, scores = vocabulary(n)
    kv += [("tokenizer.ggml.model", "str", "llama"), ("tokenizer.ggml.pre", "str", "default"),
           ("tokenizer.ggml.tokens", "strs", toks), ("tokenizer.ggml.scores", "f32s", scores),
           ("tokenizer.ggml.token_type", "i32s", [2, 3, 3] + [6] * 256 + [1] * (n - 259)),
           ("tokenizer.ggml.unknown_token_id", "u32", 0), ("tokenizer.ggml.bos_token_id", "u32", 1),
           ("tokenizer.ggml.eos_token_id", "u32", 2)]
    return kv


# Common English words, each a single token of the vocabulary below, as each is in the real
# models' vocabularies: `ubatch load`'s synthetic prompts are drawn from these words
# (src/loadgen/prompts.cpp), so that an N-word prompt is N tokens here as it is on a real model.
WORDS = """the of and to in is was for on that with as it at by from his her they this be are or an
had not but one all were we when there can been has more if no out so what up its about into than
them only other new some time could these two may first then do any like my now over such our man
me even most made after also did many before must through back years where much your way well
down should because each just those people how too little state good very make world still own
see men work long get here between both life being under never day same another know while last
might us great old year off come since against go came right used take three house water city
light story small river which their will would said who has him she you how said out use word
number part place where help line turn cause much mean move show form think sentence set tell
point home page letter answer found study learn plant cover food sun four thought let keep eye
near tree start earth head open seem together next white children begin walk example paper group
always music mark often until mile night car feet care second book carry took science eat room
friend began idea fish mountain stop once base hear horse cut sure watch color face wood main
enough plain girl usual young ready above ever red list though feel talk bird soon body dog
family direct pose leave song measure door product black short numeral class wind question happen
complete ship area half rock order fire south problem piece told knew pass farm top whole king
size heard best hour better true during hundred five remember step early hold west ground interest
reach fast verb sing listen six table travel less morning ten simple several vowel toward war lay
pattern slow center love person money serve appear road map rain rule govern pull cold notice
voice unit power town fine certain fly fall lead cry dark machine note wait plan figure star box
noun field rest correct able pound done beauty drive stood contain front teach week final gave
green quick develop ocean warm free minute strong special mind behind clear tail produce fact
street inch multiply nothing course stay wheel full force blue object decide surface deep moon
island foot system busy test record boat common gold possible plane stead dry wonder laugh
thousand ago ran check game shape equate hot miss brought heat snow tire bring yes distant fill
east paint language among""".split()


def vocabulary(n):
    """An SPM ("llama") vocabulary of n pieces: <unk>, <s>, </s>, the 256 byte pieces, then every
    prefix of "\u2581word" for the common words (the merges a sentencepiece tokenizer needs to
    reach a whole word, highest score first for the longest), then filler pieces "tN" that no
    English text produces. Text of those words tokenizes one token per word, as on the real
    vocabularies; any other text falls back to bytes."""
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % i for i in range(256)]
    scores = [0.0] * len(toks)
    pieces = {}
    for w in dict.fromkeys(WORDS):
        word = "\u2581" + w
        for end in range(2, len(word) + 1):
            pieces.setdefault(word[:end], -1000.0 + end)
    pieces.setdefault("\u2581", -1000.0)
    for piece, score in pieces.items():
        if len(toks) < n:
            toks.append(piece)
            scores.append(score)
    filler = n - len(toks)
    toks += ["t%d" % i for i in range(filler)]
    scores += [-2000.0] * filler
    return toks, scores


POOL_BLOCKS = 8192


def block_pool(t, rng):
    """POOL_BLOCKS valid blocks of type t: random quants, fixed power-of-two scales."""
    _, _, size = TYPES[t]
    p = bytearray(rng.randbytes(POOL_BLOCKS * size))
    f16 = lambda e: struct.pack("<e", 2.0 ** e)  # noqa: E731

    def put(off, value):  # the same bytes at offset `off` of every block
        for i, byte in enumerate(value):
            p[off + i::size] = bytes([byte]) * POOL_BLOCKS

    if t == "q8_0":  # d (f16), 32 x int8: |w| <= 127 * 2^-9
        put(0, f16(-9))
    elif t == "q4_0":  # d (f16), 16 bytes of 4-bit quants: |w| <= 8 * 2^-6
        put(0, f16(-6))
    elif t == "q4_k":  # d, dmin (f16), 12 bytes of 6-bit scales and mins, 128 bytes of quants
        put(0, f16(-12))
        put(2, f16(-12))
    elif t == "q6_k":  # ql 128, qh 64, 16 int8 scales, d (f16)
        put(208, f16(-14))
    elif t == "mxfp4":  # one E8M0 scale 2^-5, 16 bytes of E2M1 pairs: |w| <= 6 * 2^-5
        put(0, bytes([122]))
    return bytes(p)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("out")
    ap.add_argument("--type", choices=["q4_0", "q8_0", "q4_k", "q4_k_m", "f32"], default="q8_0")
    ap.add_argument("--layers", type=int, default=0, help="keep the first N layers")
    ap.add_argument("--seed", type=int, default=1234)
    o = ap.parse_args()
    s = dict(SHAPES[o.shape])
    if o.layers:
        if not 0 < o.layers <= s["n_layer"]:
            ap.error("--layers must be in 1..%d for %s" % (s["n_layer"], o.shape))
        s["n_layer"] = o.layers
        if s["kind"] == "lfm2":
            s["attn_layers"] = [il for il in s["attn_layers"] if il < o.layers]
    rng = random.Random(o.seed)
    pools = {t: block_pool(t, rng) for t in TYPES if t != "f32"}
    f32_pool = struct.pack("<4096f", *[rng.uniform(-0.05, 0.05) for _ in range(4096)])

    tensors = tensors_of(s)
    infos, offset, layout = b"", 0, []
    for name, ne, kind in tensors:
        t = tensor_type(name, ne, kind, s, o.type)
        _, bs, size = TYPES[t]
        nbytes = math.prod(ne) // bs * size
        infos += gguf_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", TYPES[t][0], offset)
        layout.append((kind, t, math.prod(ne), nbytes))
        offset += (nbytes + ALIGN - 1) // ALIGN * ALIGN
    kvs = metadata(s, o.shape, o.type)
    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kv_entry(*k) for k in kvs) + infos
    with open(o.out, "wb") as f:
        f.write(header)
        f.write(b"\0" * ((ALIGN - len(header) % ALIGN) % ALIGN))
        for i, (kind, t, n, nbytes) in enumerate(layout):
            if kind == "norm":
                f.write(struct.pack("<%df" % n, *([1.0] * n)))
            elif kind == "a":  # -exp(A_log): decays between about 0.5 and 0.99 per token
                f.write(struct.pack("<%df" % n, *[-math.exp(rng.uniform(-4.0, 0.0)) for _ in range(n)]))
            elif kind == "dt":
                f.write(struct.pack("<%df" % n, *[rng.uniform(-1.0, 1.0) for _ in range(n)]))
            else:  # stream from the type's pool, starting at a block that differs per tensor
                pool = f32_pool if t == "f32" else pools[t]
                size = 4 if t == "f32" else TYPES[t][2]
                start = (i * 7919) % (len(pool) // size) * size
                chunk = pool[start:] + pool[:start]
                left = nbytes
                while left > 0:
                    step = min(left, len(chunk))
                    f.write(chunk[:step])
                    left -= step
            f.write(b"\0" * ((ALIGN - nbytes % ALIGN) % ALIGN))
    print("wrote %s: %s (%s, %d layers), %d tensors, %.2f GiB of tensor data" %
          (o.out, o.shape, o.type, s["n_layer"], len(tensors), offset / 2**30))


if __name__ == "__main__":
    main()
