"""posenc_lib.measure: tensor memory counted exactly on simple programs; timing."""

import pytest
import torch

import posenc_lib as pl


def test_a_matrix_product_materialises_its_result():
    a = torch.randn(64, 32)
    out, peak = pl.tensor_memory(lambda: a @ a.T)
    assert out.shape == (64, 64)
    assert peak == 64 * 64 * 4


def test_freed_tensors_are_subtracted_and_views_are_not_counted_twice():
    def program():
        x = torch.zeros(1000)  # 4000 bytes
        y = x.view(10, 100)  # a view: no new memory
        z = y + 1  # 4000 more: the peak, 8000
        del x, y
        return (z * 2).sum()  # x is gone: z, z * 2 and the 4-byte sum

    _, peak = pl.tensor_memory(program)
    assert peak == 8004


def test_quadratic_bias_shows_in_the_memory_and_the_fused_path_does_not():
    """ALiBi's float bias (with a caller's mask) is (h, n, n); NoPE's causal call,
    and ALiBi's in its key form, build nothing n x n."""
    peaks = {}
    for name, masked in (("nope", False), ("alibi", False), ("alibi", True)):
        pe = pl.make_encoding(name, d_model=32, n_heads=4, max_len=512)
        mha = pl.MultiHeadAttention(32, 4, pe).eval()
        for n in (128, 256):
            x = torch.randn(1, n, 32)
            mask = torch.ones(n, n, dtype=torch.bool) if masked else None

            def call():
                return mha(x, None, causal=True, mask=mask)

            with torch.no_grad():
                _, peaks[name, masked, n] = pl.tensor_memory(call)
    for name in ("nope", "alibi"):
        assert peaks[name, False, 256] / peaks[name, False, 128] < 2.5  # linear
    assert peaks["alibi", True, 256] / peaks["alibi", True, 128] > 3.0  # quadratic


def test_the_watch_sees_the_tensors_pytree_sees_in_every_call():
    """``tensor_memory`` walks each ATen call's arguments and result with its own
    flattener: in every call of a forward and backward pass over the encodings with
    the most varied calls, it finds the tensors torch's ``tree_leaves`` finds."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    from posenc_lib.measure import _tensors

    calls = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for found in ((args, kwargs), out):
                mine = [id(t) for t in _tensors(found)]
                theirs = [id(t) for t in tree_leaves(found) if torch.is_tensor(t)]
                calls.append(mine == theirs)
            return out

    for name in ("wall", "cope", "stick_breaking", "path", "t5"):
        pe = pl.make_encoding(name, d_model=16, n_heads=2, max_len=64)
        q, k, v = (torch.randn(1, 2, 40, 8, requires_grad=True) for _ in range(3))
        x = torch.randn(1, 40, 16)
        with Record():
            pl.attention(q, k, v, pe, causal=True, x=x).sum().backward()
    assert len(calls) > 1000 and all(calls), calls.count(False)


def test_best_time_is_positive_and_arguments_are_checked():
    assert pl.best_time(lambda: torch.ones(10).sum(), repeats=2) > 0
    with pytest.raises(TypeError, match="fn must be callable"):
        pl.best_time(3)
    with pytest.raises(TypeError, match="fn must be callable"):
        pl.tensor_memory(None)
    with pytest.raises(ValueError, match="repeats must be an int >= 1"):
        pl.best_time(lambda: None, repeats=0)


def test_the_committed_benchmark_covers_every_encoding_and_path():
    """``tools/measure/bench_attention.py``'s CPU run, shipped with the library: re-run
    it when
    an encoding is added (this test names the missing ones)."""
    meta, rows = pl.attention_benchmark("cpu")
    assert meta["threads"] == 1 and meta["reference"].startswith("F.scaled_dot")
    measured = {r["encoding"] for r in rows if r.get("fwd_x") or r.get("note")}
    assert set(pl.REGISTRY) <= measured, sorted(set(pl.REGISTRY) - measured)
    for name in pl.REGISTRY:
        paths = {r["path"] for r in rows if r["encoding"] == name}
        assert {"fused", "reference", "flex"} <= paths, (name, paths)


def test_the_committed_benchmark_has_the_float_mask_each_form_replaces():
    """Path ``mask`` (the fused kernel with a ``key_bias`` or ``band_bias`` form
    switched off) for every encoding with such a form, at the length the cost
    chapter compares them: the chapter's trade of forward time against training
    time and memory reads it."""
    from posenc_lib.base import overrides

    _, rows = pl.attention_benchmark("cpu")
    for name in pl.REGISTRY:
        pe = pl.make_encoding(name, d_model=32, n_heads=4, max_len=16)
        if overrides(pe, "key_bias") or overrides(pe, "band_bias"):
            masked = [r for r in rows if (r["encoding"], r["path"]) == (name, "mask")]
            assert any(r["n"] == 2048 and r.get("fb_x") for r in masked), name


def test_the_benchmarks_mask_path_runs_the_bias_as_a_float_mask(monkeypatch):
    """``float_mask_twin``: the same encoding and output, through the float mask (its
    form never called); None for an encoding without a form."""
    from posenc_lib.backends import band_bias, key_bias
    from tools.measure.bench_attention import float_mask_twin

    assert float_mask_twin(pl.NoPE()) is None
    calls = []
    monkeypatch.setattr(key_bias, "key_bias_blocks", lambda *a: calls.append(a))
    monkeypatch.setattr(band_bias, "band_bias_blocks", lambda *a: calls.append(a))
    for name in ("alibi", "t5", "fox"):
        pe = pl.make_encoding(name, d_model=32, n_heads=4, max_len=64).double()
        twin = float_mask_twin(pe)
        q, k, v = (torch.randn(1, 4, 40, 8, dtype=torch.float64) for _ in range(3))
        x = torch.randn(1, 40, 32, dtype=torch.float64)
        got = pl.attention(q, k, v, twin, causal=True, path="fused", x=x)
        want = pl.attention(q, k, v, pe, causal=True, path="reference", x=x)
        torch.testing.assert_close(got, want)
    assert calls == []  # neither form was used


def test_an_unmeasured_device_is_refused_with_the_ones_there_are():
    with pytest.raises(ValueError, match=r"device must be one of \['cpu'"):
        pl.attention_benchmark("tpu")


def test_the_committed_model_benchmark_has_every_model_of_the_harness():
    """``tools/measure/bench_model.py``'s CPU run, shipped with the library: the
    baseline and every encoding the harness names, each with its ratios, measured
    in the configuration the harness states for the CPU."""
    from tools.measure.bench_model import CONFIGS, ENCODINGS

    meta, rows = pl.model_benchmark("cpu")
    assert {r["model"] for r in rows} == {"sdpa (baseline)", *ENCODINGS}
    for r in rows:
        assert r["fb_x_nope"] > 0 and r["fb_peak_x_nope"] > 0, r
    for key, value in CONFIGS["cpu"].items():
        if key in meta["config"]:
            assert meta["config"][key] == value, key
    with pytest.raises(ValueError, match="device must be one of"):
        pl.model_benchmark("tpu")


# ---- a GPU run's files, partial or not, as the library and the chapter read them ----

CARD = "Planted Card 80GB"  # a planted file's card: no measurement of any card


def _attention_file(stopped=None):
    meta = dict(
        device="cuda:0", machine="x86_64", card=CARD, cpus=16, threads=1,
        torch="2.11.0", numba=None, shape=dict(b=1, h=4, d=32), stopped=stopped,
        reference="F.scaled_dot_product_attention(q, k, v, is_causal=True)",
    )  # fmt: skip
    rows = [
        dict(n=2048, encoding="alibi", path="fused", positions="explicit",
             default=True, fwd_x=1.5, fb_x=2.0),
        dict(n=2048, encoding="t5", path="fused", positions="explicit", default=True,
             fwd_x=1.25),  # no backward measured: printed as "-"
        dict(n=8192, encoding="alibi", path="fused", positions="explicit",
             default=True, note="not run: past the time budget (--deadline-s)"),
    ]  # fmt: skip
    return dict(meta=meta, rows=rows)


def _model_file():
    meta = dict(
        device="cuda", device_name=CARD, cpus=16, threads=None, torch="2.11.0",
        numba=None, config=dict(vocab=1024, d_model=1024, n_heads=16, n_layers=4,
                                batch=4, n=2048, dtype="bfloat16"),
        rounds=3, stopped="time budget: 3 of 15 rounds (--deadline-s 80)",
    )  # fmt: skip
    rows = [
        dict(model="sdpa (baseline)", path="sdpa", fb_x_nope=0.9, fwd_x_nope=0.9,
             fb_peak_x_nope=1.0),
        dict(model="nope", path="fused", fb_x_nope=1.0, fwd_x_nope=1.0,
             fb_peak_x_nope=1.0),
        dict(model="cope", note="refused: planted"),
    ]  # fmt: skip
    return dict(meta=meta, rows=rows)


@pytest.fixture
def bench_dir(tmp_path, monkeypatch):
    """The committed CPU runs, in a folder of their own, read by the library."""
    import posenc_lib.measure as measure

    for path in measure.BENCH_DIR.glob("*_cpu.json"):
        (tmp_path / path.name).write_text(path.read_text())
    monkeypatch.setattr(measure, "BENCH_DIR", tmp_path)
    return tmp_path


def _plant(folder, attention: bool, model: bool, stopped=None):
    import json

    if attention:
        text = json.dumps(_attention_file(stopped))
        (folder / "attention_cuda.json").write_text(text)
    if model:
        (folder / "model_bench_cuda.json").write_text(json.dumps(_model_file()))


@pytest.mark.parametrize("attention", [False, True])
@pytest.mark.parametrize("model", [False, True])
def test_each_benchmark_is_found_on_its_own(bench_dir, attention, model):
    _plant(bench_dir, attention, model)
    assert pl.benchmark_devices() == ["cpu"] + ["cuda"] * attention
    assert pl.benchmark_devices("attention") == ["cpu"] + ["cuda"] * attention
    assert pl.benchmark_devices("model") == ["cpu"] + ["cuda"] * model
    if not model:
        with pytest.raises(ValueError, match=r"device must be one of \['cpu'\]"):
            pl.model_benchmark("cuda")
    with pytest.raises(ValueError, match="kind must be one of"):
        pl.benchmark_devices("models")


def test_a_run_is_named_by_the_fields_it_recorded():
    attention, model = _attention_file()["meta"], _model_file()["meta"]
    assert pl.benchmark_machine(attention) == f"{CARD}, torch 2.11.0"
    named = pl.benchmark_machine(model)
    assert named.startswith(f"{CARD}, torch 2.11.0 (stopped early: time budget")
    assert "None" not in named and "thread" not in named  # no CPU threads on a GPU
    cpu = pl.benchmark_machine(pl.model_benchmark("cpu")[0])
    assert "1 thread(s), torch " in cpu
    assert pl.benchmark_machine({}) == "a machine"


def _cost_cells():
    """The cost chapter's cells that read the committed GPU files, each with the
    hidden cell after it that glues its numbers (id ``<its id>-glue``), if any."""
    import json
    import pathlib

    path = pathlib.Path(__file__).parents[1] / "book" / "part6" / "cost.ipynb"
    cells = json.loads(path.read_text())["cells"]
    glue = {c.get("id"): "".join(c["source"]) for c in cells}
    return [
        "".join(c["source"]) + "\n" + glue.get(f"{c.get('id')}-glue", "")
        for c in cells
        if c["cell_type"] == "code" and "pl.benchmark_devices(" in "".join(c["source"])
    ]


@pytest.mark.parametrize("attention", [False, True])
@pytest.mark.parametrize("model", [False, True])
def test_the_cost_chapter_reads_whatever_gpu_files_exist(
    bench_dir, attention, model, capsys, monkeypatch
):
    """Attention without model, model without attention, neither, both (a GPU run
    stopped at its time limit): the chapter's cells run, name the card and print no
    missing field."""
    _plant(bench_dir, attention, model, stopped="time budget: --deadline-s 100")
    glued = {}
    monkeypatch.setattr(
        pl.book, "glue", lambda name, value, **kw: glued.update({name: value})
    )
    cells = _cost_cells()
    assert len(cells) == 2, "the cells that read the GPU files"
    for source in cells:
        exec(source, {"pl": pl})
    printed = capsys.readouterr().out
    assert "None" not in printed and "None" not in glued["bench_gpu_run"]
    assert (CARD in printed) == (attention or model)
    # the longest n with a measurement (8192 was not run), "-" for no backward
    assert ("n = 2048, each encoding's default path" in printed) == attention
    assert ("alibi                  1.50     2.00" in printed) == attention
    assert ("t5                     1.25        -" in printed) == attention
    assert ("no GPU run of the model benchmark" in printed) == (not model)
    assert ("holds no GPU run: every ratio above is from the CPU" in printed) == (
        not attention
    )


def test_the_committed_runs_name_their_paths_for_what_ran():
    """The committed benchmark files use the path names of this release ("fused",
    "reference"; the old "fast" and "slow" are only aliases of ``path=``)."""
    from tools.measure import relabel_paths

    assert relabel_paths.main(["--check"]) == 0
    for device in pl.benchmark_devices("attention"):
        _, rows = pl.attention_benchmark(device)
        assert {r["path"] for r in rows} <= {"fused", "reference", "flex", "mask"}
