#!/usr/bin/env python3
"""Reference fixtures for GGUF dequantization (worker/gguf_quants.h), checked by
tests/gguf_quants_test.cc.

Usage (from the repository root; deterministic, fixed seeds):
    /work/tools-venv/bin/python tools/make_gguf_fixtures.py \
        [--model ~/.cache/tpserve/models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf | --no-model] \
        [--out tests/fixtures/gguf/quants]

Writes into --out, for each case NAME:
    NAME.blocks  the raw ggml blocks of `rows` rows (row after row, as in a GGUF file)
    NAME.f32     gguf.quants.dequantize of them: rows * row_elems little-endian float32
and manifest.json listing the cases (name, ggml type, rows, row_elems, row_bytes, source).

Cases:
  * one per supported type, 4 rows of 512 elements. Rows 0-2 are random normal data at
    per-row scales from 1e-3 to 10 (negative values included), quantized with
    gguf.quants.quantize where the package can quantize the type (F32, F16, BF16, Q4_0, Q4_1,
    Q5_0, Q5_1, Q8_0); for the K-quants, which it cannot, they are random block bytes whose
    fp16 d/dmin are set to finite values from 1e-4 to 0.1. Row 3 is the extreme row: every
    block's fp16 scales are patched to values cycling through +-65504, fp16 subnormals
    (2^-24, the largest subnormal), the smallest normal, +-0 and +-1; for the float types it
    holds random bit patterns (infinities, subnormals; for F16 NaNs are quiet ones).
  * with the model: the first two rows of one tensor per quantized type that the real
    Gemma 3 270M Q4_K_M file uses, so real blocks are checked too. The script fails if the
    model uses a type the C++ side does not decode.
"""

import argparse
import importlib.metadata
import json
import os
import sys
from collections import Counter

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

# The types worker/gguf_quants.cc decodes, in its order.
SUPPORTED = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0,
             T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]
QUANTIZABLE = {T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0}
# Byte offsets of the fp16 fields in one block: (d, and the min/dmin where the type has one).
FP16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}
# Finite extremes for the patched row, as fp16 bit patterns.
EXTREME_F16 = [0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x03FF, 0x0400, 0x0000, 0x8000, 0x3C00, 0xBC00]
ROWS = 4
ROW_ELEMS = 512
# One tensor per quantized type in gemma-3-270m-q4_k_m.gguf.
MODEL_TENSORS = {
    T.Q8_0: "token_embd.weight",
    T.Q5_0: "blk.0.attn_q.weight",
    T.Q4_K: "blk.0.attn_output.weight",
    T.Q6_K: "blk.0.ffn_down.weight",
}
MODEL_ROWS = 2


def row_bytes(qtype, elems):
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    assert elems % block_elems == 0
    return elems // block_elems * block_bytes


def synthetic(qtype, rng):
    """uint8 blocks [ROWS, row_bytes] for one type; see the module docstring."""
    nbytes = row_bytes(qtype, ROW_ELEMS)
    scales = 10.0 ** rng.uniform(-3, 1, size=(ROWS - 1, 1))
    data = (rng.standard_normal((ROWS - 1, ROW_ELEMS)) * scales).astype(np.float32)
    if qtype in QUANTIZABLE:
        body = np.ascontiguousarray(gguf.quants.quantize(data, qtype)).view(np.uint8).reshape(ROWS - 1, nbytes)
    else:
        block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
        nblocks = (ROWS - 1) * ROW_ELEMS // block_elems
        blocks = rng.integers(0, 256, size=(nblocks, block_bytes), dtype=np.uint8)
        for off in FP16_FIELDS[qtype]:
            d = (10.0 ** rng.uniform(-4, -1, size=nblocks)).astype(np.float16)
            blocks[:, off:off + 2] = d.view(np.uint8).reshape(nblocks, 2)
        body = blocks.reshape(ROWS - 1, nbytes)

    if qtype in FP16_FIELDS:
        block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
        nblocks = ROW_ELEMS // block_elems
        if qtype in QUANTIZABLE:
            # Quantize a fresh row, then overwrite its scales.
            row = rng.standard_normal((1, ROW_ELEMS)).astype(np.float32)
            extreme = np.asarray(gguf.quants.quantize(row, qtype)).reshape(nblocks, block_bytes).copy()
        else:
            extreme = rng.integers(0, 256, size=(nblocks, block_bytes), dtype=np.uint8)
        for b in range(nblocks):
            for i, off in enumerate(FP16_FIELDS[qtype]):
                h = EXTREME_F16[(b + 3 * i) % len(EXTREME_F16)]
                extreme[b, off:off + 2] = np.array([h], dtype="<u2").view(np.uint8)
        extreme = extreme.reshape(1, nbytes)
    elif qtype == T.F32:
        extreme = rng.integers(0, 2**32, size=(1, ROW_ELEMS), dtype=np.uint32).view(np.uint8)
    else:  # F16, BF16: any 16-bit pattern
        bits = rng.integers(0, 2**16, size=(1, ROW_ELEMS), dtype=np.uint16)
        if qtype == T.F16:
            # numpy may convert with F16C, which quiets signaling NaNs; ggml and F16ToF32 keep
            # the payload. Only quiet NaNs, so the reference is one number.
            nan = ((bits & 0x7C00) == 0x7C00) & ((bits & 0x3FF) != 0)
            bits = np.where(nan, bits | 0x200, bits).astype(np.uint16)
        extreme = bits.view(np.uint8)
    return np.concatenate([body, extreme.reshape(1, nbytes)], axis=0)


def reference(blocks, qtype):
    out = gguf.quants.dequantize(np.ascontiguousarray(blocks), qtype)
    return np.ascontiguousarray(out, dtype=np.float32).reshape(blocks.shape[0], -1)


def write_case(out_dir, manifest, name, qtype, blocks, source):
    ref = reference(blocks, qtype)
    rows, elems = ref.shape
    assert blocks.shape == (rows, row_bytes(qtype, elems)), (name, blocks.shape)
    blocks.astype(np.uint8).tofile(os.path.join(out_dir, name + ".blocks"))
    ref.astype("<f4").tofile(os.path.join(out_dir, name + ".f32"))
    manifest["cases"].append({"name": name, "type": qtype.name, "type_id": int(qtype),
                              "rows": int(rows), "row_elems": int(elems),
                              "row_bytes": int(blocks.shape[1]), "source": source})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/tpserve/models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--no-model", action="store_true", help="synthetic cases only")
    ap.add_argument("--out", default="tests/fixtures/gguf/quants")
    args = ap.parse_args()

    os.makedirs(args.out, exist_ok=True)
    for f in os.listdir(args.out):  # stale cases from an earlier run
        if f.endswith((".blocks", ".f32")) or f == "manifest.json":
            os.remove(os.path.join(args.out, f))
    manifest = {"generator": "tools/make_gguf_fixtures.py",
                "gguf_py_version": importlib.metadata.version("gguf"), "cases": []}

    for i, qtype in enumerate(SUPPORTED):
        rng = np.random.default_rng(1000 + i)
        how = "gguf.quants.quantize" if qtype in QUANTIZABLE else "random blocks, fp16 scales in [1e-4, 0.1]"
        write_case(args.out, manifest, qtype.name, qtype, synthetic(qtype, rng),
                   f"rows 0-2: {how}; row 3: extreme scales / bit patterns")

    if not args.no_model:
        if not os.path.exists(args.model):
            sys.exit(f"{args.model} not found: pass --model PATH or --no-model")
        reader = gguf.GGUFReader(args.model)
        used = Counter(t.tensor_type for t in reader.tensors)
        print("model tensor types:", ", ".join(f"{t.name} x{n}" for t, n in sorted(used.items())))
        missing = [t.name for t in used if t not in SUPPORTED]
        if missing:
            sys.exit(f"the model uses types the C++ side does not decode: {missing}")
        by_name = {t.name: t for t in reader.tensors}
        for qtype, tname in MODEL_TENSORS.items():
            t = by_name[tname]
            assert t.tensor_type == qtype, (tname, t.tensor_type)
            blocks = np.array(t.data[:MODEL_ROWS], dtype=np.uint8)
            write_case(args.out, manifest, "gemma3_270m_" + qtype.name, qtype, blocks,
                       f"{os.path.basename(args.model)}: {tname}, first {MODEL_ROWS} rows")
        for qtype in used:
            if qtype not in MODEL_TENSORS and qtype not in (T.F32,):
                sys.exit(f"add a tensor of type {qtype.name} to MODEL_TENSORS")

    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(args.out, p)) for p in os.listdir(args.out))
    print(f"wrote {len(manifest['cases'])} cases, {total} bytes, to {args.out}")


if __name__ == "__main__":
    main()
