#!/usr/bin/env python3
"""Build the Gemma 4 MTP drafter fixtures: a tiny target, tiny assistants, reference traces.

Writes ``tests/fixtures/models/gemma4_mtp/``:

* ``target/``: ``Gemma4ForCausalLM`` with exactly the weights of the ``gemma4_text``
  fixture (built by tools/make_model_fixtures.py's own recipe, so the two never drift).
* ``assistant/``: ``Gemma4AssistantForCausalLM`` with the dense tied ``lm_head``
  (``use_ordered_embeddings: false``, as the 26B/31B assistants).
* ``assistant_ordered/``: the same trunk with the centroid-masked head
  (``use_ordered_embeddings: true``, as the E2B/E4B assistants).
* ``reference.json``: speculative-decoding rounds for a fixed prompt, replayed with
  direct module calls exactly as transformers' ``SinglePositionMultiTokenCandidateGenerator``
  and ``_assisted_decoding`` run them, and checked call by call against
  ``target.generate(assistant_model=...)``.  A second trace per assistant uses the
  consistent KV ranges that docs/mtp_drafter.md recommends for a paged cache.

docs/mtp_drafter.md specifies what the drafter computes; the fixture's README lists
every field.  Deterministic (fixed seeds, one CPU thread) and idempotent: the generated
files are deleted and rewritten (the hand-written README stays), and re-running produces
identical bytes.

Usage:
    python tools/make_mtp_fixtures.py            # writes tests/fixtures/models/gemma4_mtp
    python tools/make_mtp_fixtures.py --out DIR  # somewhere else
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import (
    DynamicCache,
    Gemma4AssistantConfig,
    Gemma4AssistantForCausalLM,
    Gemma4ForCausalLM,
    Gemma4TextConfig,
    GenerationConfig,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_model_fixtures as mmf  # noqa: E402  (the gemma4_text recipe and JSON number format)

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "models" / "gemma4_mtp"
GEMMA4_TEXT_FIXTURE = REPO_ROOT / "tests" / "fixtures" / "models" / "gemma4_text"

NUM_DRAFT_TOKENS = 4  # assistant generation_config.num_assistant_tokens (K)
NEW_TOKENS = 8
SLIDING, FULL = "sliding_attention", "full_attention"

# The assistant mirrors the published ones (4 layers: 3 sliding + 1 full, every layer
# KV-shared, no PLE, no softcap) at the target's attention geometry, which it must match
# because it reads the target's K/V.  Hidden 40 differs from the backbone's 64 and from
# every head width, so a mixed-up dimension fails loudly.
ASSISTANT_TEXT_KWARGS = dict(
    mmf.GEMMA4_TEXT_KWARGS,
    hidden_size=40,
    intermediate_size=80,
    num_hidden_layers=4,
    layer_types=[SLIDING] * 3 + [FULL],
    num_kv_shared_layers=4,
    final_logit_softcapping=None,
    hidden_size_per_layer_input=0,
    vocab_size_per_layer_input=0,
)
NUM_CENTROIDS = 16  # 32 tokens per centroid
CENTROID_TOP_K = 4  # 128 of the 512 tokens get a real logit
ASSISTANT_SEED = 4101
ORDERING_SEED = 4103

# The dense assistant is trained on the fixture prompt's own greedy continuation, for
# the first DISTILL_DRAFT_STEPS draft steps only: its first drafts in a round then tend
# to be right and its later ones wrong, so the traces hold partial acceptance, not only
# the rejections an untrained random drafter gives.
DISTILL_DRAFT_STEPS = 2
DISTILL_STEPS = 100
DISTILL_LR = 3e-3


# --------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------


def build_target() -> Gemma4ForCausalLM:
    """The gemma4_text fixture model, by its own recipe (num_kv_shared_layers = 0)."""
    spec = mmf.FIXTURES["gemma4_text"]
    torch.manual_seed(spec["seed"])
    model = spec["build"]()
    mmf.randomize_weights(model, spec["seed"], **spec["init"])
    assert model.config.num_kv_shared_layers == 0
    return model.eval()


def assistant_config(ordered: bool) -> Gemma4AssistantConfig:
    return Gemma4AssistantConfig(
        text_config=Gemma4TextConfig(**ASSISTANT_TEXT_KWARGS),
        backbone_hidden_size=mmf.GEMMA4_TEXT_KWARGS["hidden_size"],
        use_ordered_embeddings=ordered,
        num_centroids=NUM_CENTROIDS,
        centroid_intermediate_top_k=CENTROID_TOP_K,
        tie_word_embeddings=True,
    )


def build_assistant(target: Gemma4ForCausalLM, prompt: list[int]) -> Gemma4AssistantForCausalLM:
    torch.manual_seed(ASSISTANT_SEED)
    model = Gemma4AssistantForCausalLM(assistant_config(ordered=False))
    mmf.randomize_weights(model, ASSISTANT_SEED, **mmf.GEMMA4_INIT)
    model.set_attn_implementation("eager")
    distill(model, target, prompt)
    model.generation_config.num_assistant_tokens = NUM_DRAFT_TOKENS
    return model.eval()


def build_ordered_assistant(dense: Gemma4AssistantForCausalLM) -> Gemma4AssistantForCausalLM:
    """The dense assistant's trunk plus a centroid head over a random token ordering.

    Each centroid is the mean of its cluster's lm_head rows, so the selected clusters
    usually (not always) hold the dense argmax: both cases occur in the traces."""
    model = Gemma4AssistantForCausalLM(assistant_config(ordered=True))
    missing, unexpected = model.load_state_dict(dense.state_dict(), strict=False)
    assert not unexpected and sorted(missing) == ["masked_embedding.centroids.weight",
                                                  "masked_embedding.token_ordering"], missing
    gen = torch.Generator().manual_seed(ORDERING_SEED)
    vocab = model.config.text_config.vocab_size
    ordering = torch.randperm(vocab, generator=gen)
    clusters = ordering.view(NUM_CENTROIDS, vocab // NUM_CENTROIDS)
    with torch.no_grad():
        model.masked_embedding.token_ordering.copy_(ordering)
        model.masked_embedding.centroids.weight.copy_(model.lm_head.weight[clusters].mean(dim=1))
    model.generation_config.num_assistant_tokens = NUM_DRAFT_TOKENS
    return model.eval()


# --------------------------------------------------------------------------------------
# Distillation (makes some drafts right; the fixture does not depend on how well)
# --------------------------------------------------------------------------------------


@torch.no_grad()
def distill_data(target: Gemma4ForCausalLM, prompt: list[int]) -> dict:
    """The prompt and its greedy continuation, with the target's post-norm hidden states
    and its shared K/V (last sliding and last full layer) over every position."""
    ids = torch.tensor([prompt])
    tokens = target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=greedy_config())
    out = target(input_ids=tokens, use_cache=False, output_hidden_states=True, return_shared_kv_states=True)
    return dict(tokens=tokens, hidden=out.hidden_states[-1], kv=dict(out.shared_kv_states),
                embeds=target.get_input_embeddings()(tokens), first_query=len(prompt))


def clean_masks(length: int, window: int) -> dict:
    """Additive masks for queries at every position t of a sequence: the drafter at t
    sees K/V of positions [0, t) (full) and [t-1-window, t) (sliding).  Row 0 sees
    position 0 only to stay finite; it is never in the loss."""
    t = torch.arange(length)[:, None]
    j = torch.arange(length)[None, :]
    full = (j < t) | ((t == 0) & (j == 0))
    sliding = full & (j >= t - 1 - window)
    neg = torch.finfo(torch.float32).min
    return {name: torch.zeros(length, length).masked_fill(~allowed, neg)[None, None]
            for name, allowed in ((FULL, full), (SLIDING, sliding))}


def drafter_batch_step(assistant, embeds, hidden, masks, kv):
    """One draft step for a query at every position at once (queries are independent:
    the drafter has no K/V of its own).  Returns (logits, projected hidden)."""
    positions = torch.arange(embeds.shape[1])[None].expand(embeds.shape[0], -1)
    x = assistant.pre_projection(torch.cat([embeds, hidden], dim=-1))
    # A non-int logits_to_keep skips Gemma4TextModel._maybe_slice_kv_shared_inputs, which
    # fails on more than one query without per-layer inputs (transformers 5.24).
    h = assistant.model(inputs_embeds=x, attention_mask=masks, position_ids=positions,
                        shared_kv_states=kv, use_cache=False, logits_to_keep=slice(None)).last_hidden_state
    return assistant.lm_head(h), assistant.post_projection(h)


def distill_loss(assistant, data: dict, masks: dict) -> torch.Tensor:
    """Cross-entropy of chained draft steps against the greedy tokens that follow.
    Step 1 at query t gets (embed(x_t), h_{t-1}); step k gets (embed(x_{t+k-1}),
    projected output of step k-1); its label is x_{t+k}."""
    tokens, embeds = data["tokens"], data["embeds"]
    length = tokens.shape[1]
    hidden = torch.cat([torch.zeros_like(data["hidden"][:, :1]), data["hidden"][:, :-1]], dim=1)
    first = data["first_query"]
    loss = 0.0
    for k in range(1, DISTILL_DRAFT_STEPS + 1):
        step_embeds = torch.roll(embeds, shifts=-(k - 1), dims=1)
        logits, hidden = drafter_batch_step(assistant, step_embeds, hidden, masks, data["kv"])
        last = length - k  # queries whose label x_{t+k} exists
        loss = loss + torch.nn.functional.cross_entropy(logits[0, first:last], tokens[0, first + k:])
    return loss / DISTILL_DRAFT_STEPS


def distill(assistant: Gemma4AssistantForCausalLM, target: Gemma4ForCausalLM, prompt: list[int]) -> None:
    data = distill_data(target, prompt)
    masks = clean_masks(data["tokens"].shape[1], assistant.config.text_config.sliding_window)
    opt = torch.optim.Adam(assistant.parameters(), lr=DISTILL_LR)
    assistant.train()
    for step in range(DISTILL_STEPS):
        loss = distill_loss(assistant, data, masks)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"  distilled {DISTILL_STEPS} steps, loss {loss.item():.4f}")
    assistant.eval()


# --------------------------------------------------------------------------------------
# Speculative decoding, replayed with direct module calls
# --------------------------------------------------------------------------------------


class TargetKv:
    """The K/V the target has computed for accepted tokens, per layer type, as one
    tensor [1, kv_heads, positions 0..n-1, head_dim]: what a paged cache holds."""

    def __init__(self, shared_kv: dict, length: int):
        self.kv = {t: (k[:, :, -length:], v[:, :, -length:]) for t, (k, v) in shared_kv.items()}

    def append(self, shared_kv: dict, new: int, keep: int) -> None:
        """Append the last `new` positions of a forward's shared K/V, then keep `keep`."""
        for t, (k, v) in shared_kv.items():
            old_k, old_v = self.kv[t]
            self.kv[t] = (torch.cat([old_k, k[:, :, -new:]], dim=2)[:, :, :keep],
                          torch.cat([old_v, v[:, :, -new:]], dim=2)[:, :, :keep])


def target_forward(target, tokens: list[int], start: int, cache, logits_to_keep: int) -> object:
    """One target forward over `tokens` at positions start.., as _assisted_decoding asks
    for it (utils.py:4072-4085): the last logits_to_keep logits, post-norm hidden states
    of every token, and the shared K/V dictionary."""
    ids = torch.tensor([tokens])
    return target(input_ids=ids, position_ids=torch.arange(start, start + len(tokens))[None], cache=cache,
                  use_cache=True, logits_to_keep=logits_to_keep, output_hidden_states=True,
                  return_shared_kv_states=True)


def hf_draft_kv(last_shared_kv: dict, current_length: int) -> dict:
    """transformers' choice (candidate_generator.py:1318-1321): the last target forward's
    shared K/V, cut to the first current_length entries of each tensor."""
    return {t: (k[:, :, :current_length], v[:, :, :current_length]) for t, (k, v) in last_shared_kv.items()}


def clean_draft_kv(history: TargetKv, position: int, window: int) -> dict:
    """K/V of accepted tokens only: positions [0, L) for full layers and
    [L-1-window, L) for sliding ones (the window transformers' mask gives in round 1)."""
    k_full, v_full = history.kv[FULL]
    k_sw, v_sw = history.kv[SLIDING]
    first = max(0, position - 1 - window)
    return {FULL: (k_full[:, :, :position], v_full[:, :, :position]),
            SLIDING: (k_sw[:, :, first:position], v_sw[:, :, first:position])}


def seen_positions(kv: dict, first_positions: dict, window: int) -> dict:
    """Absolute positions [first, last] of the K/V entries the drafter attends to.
    `first_positions` gives the position of each tensor's entry 0.  Full layers see
    every entry; the sliding mask keeps the last window+1 entries
    (modeling_gemma4_assistant.py:203-244, masking_utils.py:139-156)."""
    seen = {}
    for t in (FULL, SLIDING):
        entries = kv[t][0].shape[2]
        length = entries if t == FULL else min(entries, window + 1)
        last = first_positions[t] + entries - 1
        seen[t] = [last - length + 1, last]
    return seen


def run_drafter(assistant, embed, last_token: int, hidden: torch.Tensor, position: int, kv: dict,
                steps: int) -> list[dict]:
    """The drafting loop of candidate_generator.py:1331-1352: every step feeds the
    target's scaled embedding of the previous token and the previous hidden state,
    at one constant position, and takes the argmax."""
    inner = {}  # the drafter's post-norm state, before post_projection and the head
    hook = assistant.model.register_forward_hook(lambda m, i, out: inner.__setitem__("h", out.last_hidden_state))
    records = []
    token = last_token
    try:
        for _ in range(steps):
            inputs_embeds = torch.cat([embed(torch.tensor([[token]])), hidden], dim=-1)
            out = assistant(inputs_embeds=inputs_embeds, attention_mask=None,
                            position_ids=torch.tensor([[position]]), shared_kv_states=kv, use_cache=False)
            records.append(dict(input_token_id=token, input_hidden=hidden[0, 0], inputs_embeds=inputs_embeds,
                                position=position, kv=kv, drafter_hidden=inner["h"][0, 0], logits=out.logits[0, 0],
                                projected_hidden=out.last_hidden_state[0, 0],
                                token_id=int(out.logits[0, 0].argmax())))
            token, hidden = records[-1]["token_id"], out.last_hidden_state
    finally:
        hook.remove()
    return records


@torch.no_grad()
def speculative_trace(target, assistant, prompt: list[int], mode: str) -> dict:
    """Greedy speculative decoding of NEW_TOKENS tokens.  mode "transformers" takes the
    drafter's K/V as transformers does; "clean" takes only accepted tokens' K/V."""
    window = assistant.config.text_config.sliding_window
    max_length = len(prompt) + NEW_TOKENS
    embed = target.get_input_embeddings()
    cache = DynamicCache(config=target.config)
    cache.activate_past_recording()

    out = target_forward(target, prompt, 0, cache, logits_to_keep=1)
    ids = prompt + [int(out.logits[0, -1].argmax())]
    cache.crop(0)  # _assisted_decoding crops after every forward, restoring the sliding layers' size
    history = TargetKv(out.shared_kv_states, len(prompt))
    hidden = out.hidden_states[-1][:, -1:]
    last_forward_end = len(prompt) - 1  # position of the last entry of out.shared_kv_states
    rounds = []
    while len(ids) < max_length:
        position = len(ids) - 1  # L: the last token's position; its K/V is not computed yet
        steps = min(NUM_DRAFT_TOKENS, max_length - len(ids) - 1)
        if mode == "transformers":
            kv = hf_draft_kv(out.shared_kv_states, len(ids))
            # The shared sliding tensor is windowed: its entry 0 is not position 0.
            sw_entries = out.shared_kv_states[SLIDING][0].shape[2]
            seen = seen_positions(kv, {FULL: 0, SLIDING: last_forward_end - sw_entries + 1}, window)
        else:
            kv = clean_draft_kv(history, position, window)
            seen = seen_positions(kv, {FULL: 0, SLIDING: max(0, position - 1 - window)}, window)
        drafts = run_drafter(assistant, embed, ids[-1], hidden, position, kv, steps) if steps > 0 else []
        draft_ids = [d["token_id"] for d in drafts]

        out = target_forward(target, [ids[-1]] + draft_ids, position, cache, logits_to_keep=len(draft_ids) + 1)
        target_ids = out.logits[0].argmax(-1).tolist()
        accepted = next((i for i, (d, t) in enumerate(zip(draft_ids, target_ids)) if d != t), len(draft_ids))
        emitted = (draft_ids[:accepted] + [target_ids[accepted]])[:max_length - len(ids)]
        accepted = len(emitted) - 1
        cache.crop(-(len(draft_ids) - accepted))
        history.append(out.shared_kv_states, len(draft_ids) + 1, position + accepted + 1)
        rounds.append(dict(position=position, last_token_id=ids[-1], target_hidden=hidden[0, 0], seen=seen,
                           drafts=drafts, draft_ids=draft_ids, target_argmax=target_ids, accepted=accepted,
                           emitted=emitted))
        ids += emitted
        hidden = out.hidden_states[-1][:, accepted:accepted + 1]
        last_forward_end = position + len(draft_ids)
    return dict(rounds=rounds, generated=ids[len(prompt):])


# --------------------------------------------------------------------------------------
# Cross-checks against transformers' own generate()
# --------------------------------------------------------------------------------------


def greedy_config() -> GenerationConfig:
    return GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=NEW_TOKENS, min_new_tokens=0,
                            eos_token_id=None, pad_token_id=0, bos_token_id=None,
                            temperature=None, top_p=None, top_k=None)


@torch.no_grad()
def plain_greedy(target, prompt: list[int]) -> list[int]:
    ids = torch.tensor([prompt])
    seq = target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=greedy_config())
    return seq[0, len(prompt):].tolist()


@torch.no_grad()
def assisted_generate(target, assistant, prompt: list[int]) -> tuple[list[int], list[dict]]:
    """target.generate(assistant_model=assistant), recording every assistant call."""
    calls = []
    forward = assistant.forward

    def recording_forward(*args, **kwargs):
        out = forward(*args, **kwargs)
        calls.append(dict(kwargs=kwargs, out=out))
        return out

    assistant.forward = recording_forward
    try:
        ids = torch.tensor([prompt])
        seq = target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=greedy_config(),
                              assistant_model=assistant)
    finally:
        del assistant.forward
    return seq[0, len(prompt):].tolist(), calls


def check_replay(trace: dict, calls: list[dict]) -> None:
    """The replay must feed the drafter bit-identical inputs and get bit-identical outputs."""
    steps = [s for r in trace["rounds"] for s in r["drafts"]]
    assert len(steps) == len(calls), f"{len(steps)} replayed draft steps, generate() made {len(calls)}"
    for i, (step, call) in enumerate(zip(steps, calls)):
        kw, out = call["kwargs"], call["out"]
        assert kw["attention_mask"] is None  # generate() drops an all-ones mask
        assert torch.equal(kw["inputs_embeds"], step["inputs_embeds"]), f"step {i}: inputs_embeds"
        assert kw["position_ids"].tolist() == [[step["position"]]], f"step {i}: position_ids"
        for t in (FULL, SLIDING):
            for a, b in zip(kw["shared_kv_states"][t], step["kv"][t]):
                assert torch.equal(a, b), f"step {i}: {t} K/V"
        assert torch.equal(out.logits[0, 0], step["logits"]), f"step {i}: logits"
        assert torch.equal(out.last_hidden_state[0, 0], step["projected_hidden"]), f"step {i}: projected hidden"


def check_margins(trace: dict, name: str) -> float:
    """No draft may hinge on float rounding: top-1 minus top-2 logit > 1e-3.  Returns the
    smallest margin."""
    margins = []
    for r in trace["rounds"]:
        for s in r["drafts"]:
            top2 = torch.topk(s["logits"], 2).values
            margins.append(float(top2[0] - top2[1]))
    margin = min(margins)
    assert margin > 1e-3, f"{name}: a draft's top-1/top-2 margin is {margin}"
    return margin


@torch.no_grad()
def check_centroid_gaps(assistant, trace: dict, name: str) -> float:
    """The centroid head's choice of clusters must not hinge on float rounding either:
    k-th minus (k+1)-th centroid score > 1e-3.  Returns the smallest gap."""
    k = assistant.config.centroid_intermediate_top_k
    gaps = []
    for r in trace["rounds"]:
        for s in r["drafts"]:
            top = torch.topk(assistant.masked_embedding.centroids(s["drafter_hidden"]), k + 1).values
            gaps.append(float(top[k - 1] - top[k]))
    gap = min(gaps)
    assert gap > 1e-3, f"{name}: a step's centroid top-k gap is {gap}"
    return gap


# --------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------


def save_checkpoint(model, out: Path, nested_text_config: bool) -> None:
    """save_pretrained, then the published Gemma 4 field names in config.json."""
    model.save_pretrained(out)
    for p in out.iterdir():
        p.chmod(0o644)  # safetensors files are written 0600
    # rewrite_gemma4_config(multimodal=True) rewrites a nested text_config, which the
    # assistant config also has.
    mmf.rewrite_gemma4_config(out / "config.json", multimodal=nested_text_config)


def reload(cls, path: Path, original) -> torch.nn.Module:
    """Load the files back in float32 with eager attention; they must hold the same tensors."""
    model, info = cls.from_pretrained(path, dtype=torch.float32, attn_implementation="eager",
                                      output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    assert not problems, f"{path.name}: loading issues {problems}"
    mine, theirs = original.state_dict(), model.state_dict()
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine), path.name
    return model.eval()


def check_same_as_gemma4_text(target_dir: Path) -> None:
    """target/ must be the gemma4_text fixture, byte for byte, so C++ tests can share it."""
    for name in ("config.json", "model.safetensors"):
        theirs = GEMMA4_TEXT_FIXTURE / name
        if not theirs.exists():
            print(f"  note: {theirs} missing, target/ not compared with it")
            continue
        assert (target_dir / name).read_bytes() == theirs.read_bytes(), f"target/{name} != gemma4_text/{name}"


def to_json(value, indent: str = "") -> str:
    """JSON with float32 numbers as 9 significant digits (exact on a float parse) and one
    vector per line, so diffs stay readable."""
    inner = indent + "  "
    if isinstance(value, torch.Tensor):
        value = value.detach().float().numpy()
    if isinstance(value, np.ndarray):
        if value.ndim == 1:
            return mmf.fmt_row(value.astype(np.float32))
        return "[\n" + ",\n".join(inner + to_json(row, inner) for row in value) + "\n" + indent + "]"
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(k)}: {to_json(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list) and any(isinstance(v, (dict, list, torch.Tensor, np.ndarray)) for v in value):
        return "[\n" + ",\n".join(inner + to_json(v, inner) for v in value) + "\n" + indent + "]"
    return json.dumps(value)


def kv_rows(kv: tuple) -> dict:
    """K and V [1, kv_heads, n, head_dim] as rows [kv_head * n + i][head_dim]."""
    k, v = kv
    return dict(keys=k[0].reshape(-1, k.shape[-1]), values=v[0].reshape(-1, v.shape[-1]))


def round1_kv(clean_trace: dict) -> dict:
    """The target K/V the first round's drafter attends to, so a drafter test can run
    without a target.  Round 1 is the same in both traces and for both assistants; in
    the clean trace the tensors hold exactly the attended positions."""
    first = clean_trace["rounds"][0]
    kv, seen = first["drafts"][0]["kv"], first["seen"]
    part = {}
    for t in (FULL, SLIDING):
        assert kv[t][0].shape[2] == seen[t][1] - seen[t][0] + 1
        part[t] = dict(positions=seen[t], **kv_rows(kv[t]))
    return part


@torch.no_grad()
def selected_centroids(assistant, drafter_hidden: torch.Tensor) -> list[int]:
    """Centroid ids the ordered head keeps, best first (modeling_gemma4_assistant.py:60-62)."""
    scores = assistant.masked_embedding.centroids(drafter_hidden)
    return torch.topk(scores, k=assistant.config.centroid_intermediate_top_k).indices.tolist()


def round_json(r: dict, assistant) -> dict:
    """One round as tests/fixtures/models/gemma4_mtp/README.md describes it."""
    stale = {t: [p for p in range(lo, hi + 1) if p >= r["position"]] for t, (lo, hi) in r["seen"].items()}
    steps = []
    for s in r["drafts"]:
        step = dict(input_token_id=s["input_token_id"], token_id=s["token_id"])
        if assistant.config.use_ordered_embeddings:
            step["selected_centroids"] = selected_centroids(assistant, s["drafter_hidden"])
        step.update(drafter_hidden=s["drafter_hidden"], projected_hidden=s["projected_hidden"], logits=s["logits"])
        steps.append(step)
    return dict(position=r["position"], last_token_id=r["last_token_id"], kv_positions=r["seen"],
                stale_kv_positions=stale, draft_ids=r["draft_ids"], target_argmax=r["target_argmax"],
                accepted=r["accepted"], emitted=r["emitted"], target_hidden=r["target_hidden"], draft_steps=steps)


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------

MODES = ("transformers", "clean")
MIN_DISTINCT_DRAFTS = 3
OUTPUTS = ("target", "assistant", "assistant_ordered", "reference.json")  # README.md is hand-written


def gemma4_text_prompt(vocab: int, pad_id: int) -> list[int]:
    """The gemma4_text fixture's prompt (make_model_fixtures.make_fixture's recipe)."""
    rng = np.random.RandomState(mmf.FIXTURES["gemma4_text"]["seed"])
    prompt = []
    while len(prompt) < mmf.PROMPT_LEN:
        t = int(rng.randint(2, vocab))
        if t != pad_id:
            prompt.append(t)
    return prompt


def check_gemma4_text_reference(prompt: list[int], greedy: list[int]) -> None:
    path = GEMMA4_TEXT_FIXTURE / "reference.json"
    if path.exists():
        ref = json.loads(path.read_text())
        assert ref["prompt_ids"] == prompt and ref["greedy_ids"] == greedy, "target disagrees with gemma4_text"


def assistant_reference(target, assistant, prompt: list[int], greedy: list[int], name: str) -> tuple[dict, dict]:
    """Both traces, checked against generate(); returns (JSON part, raw clean trace)."""
    traces = {mode: speculative_trace(target, assistant, prompt, mode) for mode in MODES}
    generated, calls = assisted_generate(target, assistant, prompt)
    check_replay(traces["transformers"], calls)
    assert generated == greedy, f"{name}: assisted generate() {generated} != greedy {greedy}"
    part = dict(use_ordered_embeddings=assistant.config.use_ordered_embeddings, traces={})
    for mode, trace in traces.items():
        assert trace["generated"] == greedy, f"{name} {mode}: {trace['generated']} != greedy {greedy}"
        margin = check_margins(trace, f"{name} {mode}")
        part["traces"][mode] = dict(generated=trace["generated"],
                                    rounds=[round_json(r, assistant) for r in trace["rounds"]])
        summary = " ".join(f"L={r['position']}:{r['accepted']}/{len(r['draft_ids'])}" for r in trace["rounds"])
        gap = ""
        if assistant.config.use_ordered_embeddings:
            gap = f"  min centroid gap {check_centroid_gaps(assistant, trace, f'{name} {mode}'):.4f}"
        print(f"  {name:18s} {mode:12s} rounds {summary}  min draft margin {margin:.3f}{gap}")
    first = [traces[m]["rounds"][0]["drafts"] for m in MODES]
    assert all(torch.equal(a["logits"], b["logits"]) for a, b in zip(*first)), "round 1 differs between modes"
    drafted = {d for trace in traces.values() for r in trace["rounds"] for d in r["draft_ids"]}
    assert len(drafted) >= MIN_DISTINCT_DRAFTS, f"{name}: drafts too repetitive {sorted(drafted)}"
    return part, traces["clean"]


def dir_size(path: Path) -> int:  # recursive, unlike make_model_fixtures.dir_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def make_fixtures(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in OUTPUTS:
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()

    target = build_target()
    save_checkpoint(target, out / "target", nested_text_config=False)
    check_same_as_gemma4_text(out / "target")
    target = reload(Gemma4ForCausalLM, out / "target", target)
    prompt = gemma4_text_prompt(target.config.vocab_size, target.config.pad_token_id)
    greedy = plain_greedy(target, prompt)
    check_gemma4_text_reference(prompt, greedy)

    dense = build_assistant(target, prompt)
    assistants = {"assistant": dense, "assistant_ordered": build_ordered_assistant(dense)}
    ref = dict(transformers_version=transformers.__version__, prompt_ids=prompt, greedy_ids=greedy,
               num_draft_tokens=NUM_DRAFT_TOKENS, sliding_window=target.config.sliding_window, assistants={})
    for name, model in assistants.items():
        save_checkpoint(model, out / name, nested_text_config=True)
        model = reload(Gemma4AssistantForCausalLM, out / name, model)
        ref["assistants"][name], clean = assistant_reference(target, model, prompt, greedy, name)
    ref["round1_target_kv"] = round1_kv(clean)
    (out / "reference.json").write_text(to_json(ref) + "\n")

    for name in OUTPUTS:
        path = out / name
        size = dir_size(path) if path.is_dir() else path.stat().st_size
        print(f"{name:18s} {size / 1024:8.1f} KiB")
    print(f"total {dir_size(out) / 1024 / 1024:.2f} MiB")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    make_fixtures(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
