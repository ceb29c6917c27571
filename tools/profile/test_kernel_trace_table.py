"""kernel_trace_table.py: replays of a graph found in a trace, what each kernel adds to a replay's
span, and the table it prints, on a hand-made trace whose figures are worked out below."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kernel_trace_table as ktt  # noqa: E402

GEMV = "void microllm::ops::(anonymous namespace)::gemv_kernel<__nv_bfloat16, 1, 0, true>(" \
       "microllm::ops::gemv_detail::GemvParams<__nv_bfloat16>)"
ATTN = "void microllm::ops::(anonymous namespace)::paged_attention_kernel<float, 64>(int)"


def replay(t0: int, graph: int = 7) -> list[ktt.Kernel]:
    """Three kernels from t0 (ns): a GEMV of 5 us, attention starting 1 us before the GEMV ends
    (a programmatic launch) and ending 3 us after it, a second GEMV of 2 us starting 1 us
    after that: adds 5, 3, 3 us; span 11 us."""
    return [ktt.Kernel(t0, t0 + 5000, graph, 11, "132 x 1 x 1", GEMV),
            ktt.Kernel(t0 + 4000, t0 + 8000, graph, 12, "2 x 1 x 1", ATTN),
            ktt.Kernel(t0 + 9000, t0 + 11000, graph, 13, "132 x 1 x 1", GEMV)]


def trace() -> list[ktt.Kernel]:
    kernels = [ktt.Kernel(0, 100, 0, 0, "1 x 1 x 1", "eager_kernel")]
    for i in range(4):  # replays 20 us apart: 9 us between one's end and the next's start
        kernels += replay(1000 + 20000 * i)
    kernels += replay(200000)[:2]  # cut short: dropped
    kernels += replay(300000, graph=9)  # another graph, replayed once
    return kernels


def test_replays_are_runs_of_one_kernel_per_node():
    runs = ktt.replays(trace(), 7)
    assert len(runs) == 4
    assert [k.node for k in runs[2]] == [11, 12, 13]
    assert runs[1][0].start == 21000


def test_what_each_kernel_adds_sums_to_the_span():
    run = replay(0)
    assert ktt.added(run) == [5000, 3000, 3000]
    assert sum(ktt.added(run)) == run[-1].end - run[0].start


def test_table_of_the_most_replayed_graph():
    text = ktt.summarize(trace(), skip=1)
    assert text.startswith("graph 7: 3 replays (the first 1 skipped), 3 kernels each; span median "
                           "11.0 us, gap between replays median 9.0 us")
    rows = [line.split() for line in text.splitlines() if line[:4].strip() in ("0", "1", "2")]
    assert rows[0][1] == "gemv_kernel<__nv_bfloat16," and rows[0][-3:] == ["5.00", "5.00", "45.5%"]
    assert rows[1][-3:] == ["4.00", "3.00", "27.3%"]
    # By name: the two GEMVs together add 8 of the 11 us.
    by_name = text.split("by kernel")[1]
    assert "gemv_kernel<__nv_bfloat16, 1, 0, true>" in by_name
    gemv_row = next(line for line in by_name.splitlines() if line.startswith("gemv_kernel"))
    assert gemv_row.split()[-4:] == ["2", "7.00", "8.00", "72.7%"]


def test_a_graph_can_be_named():
    assert ktt.summarize(trace(), graph=9, skip=0).startswith("graph 9: 1 replays")


def test_errors_name_what_is_missing():
    with pytest.raises(SystemExit, match="no kernel of the trace ran in a CUDA graph"):
        ktt.summarize([ktt.Kernel(0, 1, 0, 0, "1 x 1 x 1", "k")])
    with pytest.raises(SystemExit, match="graph 9 has no whole replay after the first 1"):
        ktt.summarize(trace(), graph=9, skip=1)


def test_load_reads_the_library_csv(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("start_ns,end_ns,graph,graph_node,stream,grid,block,registers,name\n"
                    '10,20,3,5,7,132 x 1 x 1,256 x 1 x 1,48,"void f<""a"">(int)"\n')
    assert ktt.load(str(path)) == [ktt.Kernel(10, 20, 3, 5, "132 x 1 x 1", 'void f<"a">(int)')]
    assert ktt.short('void f<"a">(int)') == 'f<"a">'


def test_load_names_a_missing_or_foreign_file(tmp_path):
    with pytest.raises(SystemExit, match="cannot read .*missing.csv"):
        ktt.load(str(tmp_path / "missing.csv"))
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(SystemExit, match="is not a kernel trace"):
        ktt.load(str(other))


def test_the_repeated_block_is_the_run_that_covers_most_nodes():
    assert ktt.repeated_block(["a", "b", "c", "b", "c", "b", "c", "d"]) == (1, 2, 3)
    assert ktt.repeated_block(["a", "a", "a", "b"]) == (0, 1, 3)
    # two layers of three beat three repetitions of one
    assert ktt.repeated_block(["x", "y", "y", "x", "y", "y", "z"]) == (0, 3, 2)
    assert ktt.repeated_block(["a", "b", "c"]) is None


def test_the_table_gives_the_mean_repetition():
    """Nodes: an embedding (1 us), two layers of (GEMV 2 us, attention 1 us; the second
    layer's GEMV 4 us), a head (3 us), back to back: the layer adds (2 + 4) / 2 = 3 us and
    1 us by position, 4 us in all; 1 us before, 3 us after, span 12 us."""
    widths = [("embed", 1000), (GEMV, 2000), (ATTN, 1000), (GEMV, 4000), (ATTN, 1000),
              ("head", 3000)]
    kernels, t = [], 0
    for node, (name, width) in enumerate(widths):
        kernels.append(ktt.Kernel(t, t + width, 5, node, "1 x 1 x 1", name))
        t += width
    text = ktt.summarize(kernels, skip=0)
    block = text.split("repeated block: ")[1].splitlines()
    assert block[0] == "nodes 1-4, 2 repetitions of 2 kernels (means over the repetitions):"
    assert block[2].split()[-3:] == ["3.00", "3.00", "25.0%"]
    assert block[3].split()[-3:] == ["1.00", "1.00", "8.3%"]
    assert block[4].split()[-2:] == ["4.00", "33.3%"]
    assert block[5] == "nodes before the block add 1.00 us, after it 3.00 us"
    assert "repeated block" not in ktt.summarize(trace(), skip=1)
