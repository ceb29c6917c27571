// safetensors checkpoints: parse and validate headers, memory-map files and hand out
// zero-copy CPU views, open sharded checkpoints (model.safetensors.index.json), write
// single and sharded files atomically, and load a checkpoint into a model's parameters.
//
// Reference: https://github.com/huggingface/safetensors (README "Format") and its reader
// (safetensors/src/tensor.rs). Layout of a file:
//   [8 bytes] N, the header length, little-endian uint64
//   [N bytes] UTF-8 JSON object {"NAME": {"dtype": "BF16", "shape": [d0, ...],
//             "data_offsets": [begin, end]}, ..., "__metadata__": {"key": "value", ...}}
//             (padded with spaces so the data starts on an 8-byte boundary)
//   [rest]    the data section; each tensor's dense row-major little-endian bytes lie at
//             [begin, end) relative to the start of the data section.
// The rules this reader enforces (every one rejected with an Error naming the file and the
// tensor) are listed in docs/safetensors.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "microllm/core/tensor.h"

namespace microllm::io {

// ---- format ------------------------------------------------------------------------------

// Largest header accepted, as in Hugging Face's reader (MAX_HEADER_SIZE).
constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// "F32", "BF16", "F8_E4M3", "BOOL", ... — the safetensors name of a microllm dtype.
std::string_view safetensors_dtype_name(DType dtype);
// The microllm dtype of a safetensors dtype name; Error for unknown or unsupported names.
DType dtype_from_safetensors_name(std::string_view name);

// One tensor's header entry.
struct SafetensorsTensorInfo {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t begin = 0;  // byte range [begin, end) within the data section
  uint64_t end = 0;
  uint64_t nbytes() const { return end - begin; }
};

// A parsed and validated header.
struct SafetensorsHeader {
  std::vector<SafetensorsTensorInfo> tensors;   // in data order (ascending begin)
  std::map<std::string, std::string> metadata;  // "__metadata__" (empty when absent)
  uint64_t data_offset = 0;                     // 8 + N: where the data section starts in the file
  uint64_t data_size = 0;                       // bytes in the data section
};

// Parses and validates the header of a whole safetensors file held in memory (`file` points
// at its `size` bytes; the data section is needed to check offsets). `source` names the file
// in error messages. Never reads outside [file, file + size).
SafetensorsHeader parse_safetensors(const void* file, size_t size, const std::string& source);

// ---- reading -----------------------------------------------------------------------------

// One memory-mapped safetensors file. Cheap to copy (the mapping is shared); tensors handed
// out keep the mapping alive after the SafetensorsFile is gone.
class SafetensorsFile {
 public:
  // Maps `path` read-only-from-disk (private copy-on-write pages) and validates its header.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  // Tensor names in data order.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // Error naming the file when `name` is absent.
  const SafetensorsTensorInfo& info(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  // A CPU tensor over the mapped bytes — no copy. Writing into it changes this process's
  // private pages only, never the file. Two cases copy instead (see docs/safetensors.md):
  // data not aligned to the element size, and BOOL bytes other than 0 and 1.
  Tensor tensor(const std::string& name) const;
  // The mapped file, for checking that views are zero-copy.
  const void* mapped_data() const;
  size_t mapped_size() const;

 private:
  struct Mapping;
  std::string path_;
  std::shared_ptr<const Mapping> mapping_;
  SafetensorsHeader header_;
  std::unordered_map<std::string, size_t> index_;  // name → position in header_.tensors
};

// A checkpoint: one safetensors file, or the shards of a model.safetensors.index.json,
// seen as one collection of uniquely named tensors.
class SafetensorsCheckpoint {
 public:
  // One .safetensors file.
  static SafetensorsCheckpoint open_file(const std::string& path);
  // An index {"metadata": {...}, "weight_map": {"NAME": "SHARD_FILE", ...}}; shard files are
  // plain names in the index's directory. Every shard must exist and be valid, every name
  // must be in exactly one shard, and the weight map must agree with the shards' headers.
  static SafetensorsCheckpoint open_index(const std::string& index_path);

  // What was opened (a file or an index), for messages.
  const std::string& source() const { return source_; }
  const std::vector<SafetensorsFile>& files() const { return files_; }
  // Tensor names: shard by shard in index order, data order within a shard.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  const SafetensorsTensorInfo& info(const std::string& name) const;
  Tensor tensor(const std::string& name) const;  // zero-copy CPU view (SafetensorsFile::tensor)
  // The "__metadata__" of the first file (every shard microllm writes carries the same).
  const std::map<std::string, std::string>& metadata() const;
  // The index's "metadata" (e.g. total_size); scalars as their JSON text; empty for a file.
  const std::map<std::string, std::string>& index_metadata() const { return index_metadata_; }

 private:
  void add_file(SafetensorsFile file);
  std::string source_;
  std::vector<SafetensorsFile> files_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, size_t> where_;  // name → position in files_
  std::map<std::string, std::string> index_metadata_;
};

// Opens a Hugging Face style checkpoint. `path` is a .safetensors file, an index .json file,
// or a directory holding model.safetensors or model.safetensors.index.json (both present is
// an error: one of them is stale).
SafetensorsCheckpoint open_checkpoint(const std::string& path);

// ---- writing -----------------------------------------------------------------------------

// Tensors in the order their header entries are written.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes one safetensors file. Tensors may live on any device with any strides; each is
// converted to dense CPU bytes in its own dtype, one at a time. Data is ordered by
// descending element size so every tensor is aligned to its element size. `metadata` goes
// to "__metadata__", with "format": "pt" added when absent (transformers requires it).
// The file is written to a temporary file in the same directory, fsync'ed and renamed over
// `path`: on any failure `path` is untouched and the temporary file removed.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Writes DIR/PREFIX-00001-of-0000K.safetensors ... and DIR/PREFIX.safetensors.index.json
// (last, so the index only names shards already in place). Tensors are packed in order into
// shards of at most `max_shard_bytes` data bytes (a larger tensor gets a shard of its own).
// A stale DIR/PREFIX.safetensors is removed once the new index is in place. Returns the
// shard file names.
std::vector<std::string> save_safetensors_sharded(
    const std::string& dir, const NamedTensors& tensors, uint64_t max_shard_bytes,
    const std::map<std::string, std::string>& metadata = {}, const std::string& prefix = "model");

// ---- loading into a model ----------------------------------------------------------------

// What load_into found. Every list names every tensor concerned.
struct LoadReport {
  struct Mismatch {
    std::string name;
    Shape model_shape, checkpoint_shape;
    DType model_dtype = DType::F32, checkpoint_dtype = DType::F32;
  };
  std::vector<std::string> loaded;      // copied into the parameter of the same name
  std::vector<std::string> missing;     // parameters the checkpoint lacks
  std::vector<std::string> unexpected;  // checkpoint tensors no parameter takes
  std::vector<Mismatch> mismatched;     // different shapes, or floating vs integer dtypes
  bool ok() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  // Every problem, one line per kind; "" when ok().
  std::string describe() const;
};

struct LoadOptions {
  bool strict = true;  // any missing, unexpected or mis-shaped tensor: Error, nothing copied
  // Page-locked host memory used to stream into CUDA parameters (two halves, so converting
  // one chunk overlaps copying the previous one). Tensors larger than it go in chunks.
  size_t staging_bytes = size_t{64} << 20;
};

// Copies each checkpoint tensor into the parameter of the same name (parameters on any
// device; dtypes converted, e.g. a BF16 checkpoint into F32 parameters). Mismatched
// parameters are not touched. Strict: Error listing every problem before anything is
// copied. CUDA parameters are streamed through bounded pinned staging (CUDA builds).
LoadReport load_into(const std::map<std::string, Tensor>& params,
                     const SafetensorsCheckpoint& checkpoint, const LoadOptions& options);
LoadReport load_into(const std::map<std::string, Tensor>& params,
                     const SafetensorsCheckpoint& checkpoint, bool strict = true);

}  // namespace microllm::io
