"""safetensors interoperability: files microllm writes load in PyTorch with identical values,
and files written the way Hugging Face's library writes them load in microllm.

Debian 12 does not package the `safetensors` Python library (no python3-safetensors), so
the other side is a small pure-Python implementation of the public format, written here
from the specification (https://github.com/huggingface/safetensors, README "Format") and
mirroring the reference library's behaviour: its writer (`serialize`: tensors sorted by
descending dtype alignment then name, compact JSON with "__metadata__" first, padded with
spaces to 8 bytes) and its reader's checks (`read_metadata`: header ≤ 100 MB, UTF-8 JSON,
offsets sorted and contiguous from 0, the last one ending the file). Tensors are built
with torch.frombuffer in the torch dtype the library's torch framework returns.

microllm's side is microllm_safetensors_tool (tests/oracle/safetensors_tool.cpp), found
through $MICROLLM_SAFETENSORS_TOOL. Run by CTest (label `oracle`) with /usr/bin/python3.
"""
import json
import os
import struct
import subprocess

import numpy as np
import pytest
import torch

TOOL = os.environ.get("MICROLLM_SAFETENSORS_TOOL", "microllm_safetensors_tool")

# safetensors name → torch dtype, in the reference library's Dtype order (ascending
# alignment; its writer sorts by this order, descending).
DTYPES = {"BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "F16": torch.float16,
          "BF16": torch.bfloat16, "I32": torch.int32, "F32": torch.float32,
          "F64": torch.float64, "I64": torch.int64}
ORDER = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32",
         "F32", "F64", "I64", "U64"]
NAME_OF = {v: k for k, v in DTYPES.items()}


# ---- the reference format, in Python -----------------------------------------------------
def hf_serialize(tensors, metadata=None):
    """Bytes of a safetensors file, laid out as the reference library's serialize()."""
    items = sorted(tensors.items(), key=lambda kv: (-ORDER.index(NAME_OF[kv[1].dtype]), kv[0]))
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, t in items:
        data = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": NAME_OF[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def hf_deserialize(buffer):
    """(tensors, metadata, header_length) from file bytes, with the reference reader's checks."""
    assert len(buffer) >= 8, "HeaderTooSmall"
    (n,) = struct.unpack("<Q", buffer[:8])
    assert n <= 100_000_000, "HeaderTooLarge"
    assert 8 + n <= len(buffer), "InvalidHeaderLength"
    header = json.loads(buffer[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", None)
    entries = sorted(header.items(), key=lambda kv: tuple(kv[1]["data_offsets"]))
    start, tensors = 0, {}
    data = bytearray(buffer[8 + n:])
    for name, info in entries:
        begin, end = info["data_offsets"]
        assert begin == start and end >= begin, f"InvalidOffset({name})"
        dtype = DTYPES[info["dtype"]]
        numel = int(np.prod(info["shape"], dtype=np.int64)) if info["shape"] else 1
        assert end - begin == numel * torch.tensor([], dtype=dtype).element_size(), "TensorInvalidInfo"
        raw = data[begin:end]
        t = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(info["shape"]).clone()
        start = end
    assert start + 8 + n == len(buffer), "MetadataIncompleteBuffer"
    return tensors, metadata, n


def sample(dtype, shape, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -2**40), min(info.max, 2**40), shape, generator=g,
                         dtype=torch.int64).to(dtype)


def to_npy(t):
    """NumPy array of a torch tensor; BF16 travels as float32 (exact)."""
    return (t.to(torch.float32) if t.dtype == torch.bfloat16 else t).numpy()


def run_tool(*args):
    return subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True)


def tool_write(tmp_path, tensors, out, metadata=None, shard_bytes=0, transpose=()):
    spec = {"tensors": [], "metadata": metadata or {}, "shard_bytes": shard_bytes}
    for i, (name, t) in enumerate(tensors.items()):
        npy = tmp_path / f"in{i}.npy"
        np.save(npy, to_npy(t))
        spec["tensors"].append({"name": name, "npy": str(npy), "dtype": NAME_OF[t.dtype],
                                "transpose": name in transpose})
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    result = run_tool("write", tmp_path / "spec.json", out)
    assert result.returncode == 0, result.stderr


def tool_dump(path, out_dir):
    result = run_tool("dump", path, out_dir)
    assert result.returncode == 0, result.stderr
    manifest = json.loads((out_dir / "manifest.json").read_text())
    tensors = {}
    for entry in manifest["tensors"]:
        array = np.load(out_dir / entry["file"])
        t = torch.from_numpy(array)
        tensors[entry["name"]] = t.to(DTYPES[entry["dtype"]]) if entry["dtype"] == "BF16" else t
        assert list(t.shape) == entry["shape"]
        assert t.dtype == (torch.float32 if entry["dtype"] == "BF16" else DTYPES[entry["dtype"]])
    return tensors, manifest


def assert_same(got, expected):
    assert set(got) == set(expected)
    for name, t in expected.items():
        assert got[name].dtype == t.dtype, name
        assert got[name].shape == t.shape, name
        assert torch.equal(got[name], t), name


def every_dtype():
    tensors = {f"t.{name.lower()}": sample(dtype, (3, 5), seed)
               for seed, (name, dtype) in enumerate(DTYPES.items())}
    tensors["scalar"] = sample(torch.float32, (), 99)
    tensors["empty"] = torch.empty((0, 4), dtype=torch.bfloat16)
    tensors["model.layers.0.self_attn.q_proj.weight"] = sample(torch.bfloat16, (8, 6), 7)
    return tensors


# ---- microllm writes, Python reads -------------------------------------------------------
def test_microllm_file_loads_in_python_with_identical_values(tmp_path):
    tensors = every_dtype()
    out = tmp_path / "model.safetensors"
    tool_write(tmp_path, tensors, out, metadata={"note": "interop"},
               transpose=("t.f32", "model.layers.0.self_attn.q_proj.weight"))
    buffer = out.read_bytes()
    got, metadata, n = hf_deserialize(buffer)
    assert_same(got, tensors)
    assert metadata == {"format": "pt", "note": "interop"}
    # Header padded with spaces to 8 bytes; every tensor aligned to its element size.
    assert n % 8 == 0
    text = buffer[8:8 + n].decode()
    assert text.rstrip(" ").endswith("}") and text[0] == "{"
    for info in json.loads(text).values():
        if "data_offsets" in info:
            size = torch.tensor([], dtype=DTYPES[info["dtype"]]).element_size()
            assert info["data_offsets"][0] % size == 0


def test_microllm_sharded_checkpoint_loads_in_python(tmp_path):
    tensors = {f"model.layers.{i}.mlp.weight": sample(torch.bfloat16, (16, 8), i) for i in range(5)}
    tensors["model.norm.weight"] = sample(torch.float32, (8,), 11)
    out = tmp_path / "ckpt"
    tool_write(tmp_path, tensors, out, shard_bytes=600)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in tensors.values())
    assert list(index["weight_map"]) == sorted(tensors)
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) == 3 and shards[0] == "model-00001-of-00003.safetensors"
    got = {}
    for shard in shards:
        part, metadata, _ = hf_deserialize((out / shard).read_bytes())
        assert metadata == {"format": "pt"}
        assert all(index["weight_map"][name] == shard for name in part)
        got.update(part)
    assert_same(got, tensors)


# ---- Python writes, microllm reads -------------------------------------------------------
def test_python_file_loads_in_microllm_with_identical_values(tmp_path):
    tensors = every_dtype()
    path = tmp_path / "model.safetensors"
    path.write_bytes(hf_serialize(tensors, {"format": "pt", "k": "v"}))
    got, manifest = tool_dump(path, tmp_path / "dump")
    assert_same(got, tensors)
    assert manifest["metadata"] == {"format": "pt", "k": "v"}


def test_python_file_without_metadata_loads(tmp_path):
    tensors = {"w": sample(torch.float16, (7,), 1), "b": sample(torch.int8, (3,), 2)}
    path = tmp_path / "plain.safetensors"
    path.write_bytes(hf_serialize(tensors))
    got, manifest = tool_dump(path, tmp_path / "dump")
    assert_same(got, tensors)
    assert manifest["metadata"] == {}


def test_transformers_style_sharded_folder_loads_in_microllm(tmp_path):
    """Two shards and an index exactly as transformers' save_pretrained lays them out."""
    tensors = {"model.embed_tokens.weight": sample(torch.bfloat16, (32, 8), 1),
               "model.layers.0.input_layernorm.weight": sample(torch.bfloat16, (8,), 2),
               "model.norm.weight": sample(torch.bfloat16, (8,), 3),
               "lm_head.weight": sample(torch.bfloat16, (32, 8), 4)}
    names = list(tensors)
    shards = {"model-00001-of-00002.safetensors": names[:2], "model-00002-of-00002.safetensors": names[2:]}
    folder = tmp_path / "hf"
    folder.mkdir()
    weight_map = {}
    for shard, shard_names in shards.items():
        (folder / shard).write_bytes(hf_serialize({n: tensors[n] for n in shard_names}, {"format": "pt"}))
        weight_map.update({n: shard for n in shard_names})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    got, manifest = tool_dump(folder, tmp_path / "dump")
    assert_same(got, tensors)
    assert manifest["index_metadata"] == {"total_size": str(total)}


def test_lying_python_file_is_rejected_by_microllm(tmp_path):
    tensors = {"a": sample(torch.float32, (4,), 1), "b": sample(torch.float32, (4,), 2)}
    buffer = bytearray(hf_serialize(tensors))
    (n,) = struct.unpack("<Q", buffer[:8])
    header = json.loads(buffer[8:8 + n])
    header["b"]["data_offsets"] = [20, 36]  # a hole after 'a', running past the end
    text = json.dumps(header, separators=(",", ":")).encode()
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(buffer[8 + n:]))
    result = run_tool("dump", path, tmp_path / "dump")
    assert result.returncode == 1
    assert "bad.safetensors" in result.stderr and "tensor 'b'" in result.stderr
    assert "run past the end of the 32-byte data section" in result.stderr
