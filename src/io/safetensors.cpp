// safetensors reading: memory-mapped files handing out zero-copy CPU views, sharded
// checkpoints (model.safetensors.index.json) and Hugging Face folder discovery.
#include "microllm/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "safetensors_internal.h"

namespace microllm::io {

namespace fs = std::filesystem;

// The whole file, mapped private copy-on-write: the views' pages are shared with the page
// cache until someone writes into one, and the file itself can never be modified through
// them.
struct SafetensorsFile::Mapping {
  void* data = nullptr;
  size_t size = 0;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  Mapping(void* d, size_t s) : data(d), size(s) {}
  ~Mapping() {
    if (data) munmap(data, size);
  }
};

// ---- SafetensorsFile ---------------------------------------------------------------------

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) safetensors_fail(path, "is a directory, not a safetensors file");
  // A FIFO or device would block or have no size: only regular files are mapped.
  if (fs::exists(path, ec) && !fs::is_regular_file(path, ec))
    safetensors_fail(path, "is not a regular file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) safetensors_fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    safetensors_fail(path, std::string("cannot stat: ") + std::strerror(err));
  }
  const auto size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    safetensors_fail(
        path, "file is " + std::to_string(size) + " bytes, too short for the 8-byte header length");
  }
  // MAP_NORESERVE: a private writable mapping would otherwise be charged in full against
  // the commit limit, refusing checkpoints larger than RAM + swap that are only read.
  void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file referenced
  if (data == MAP_FAILED) safetensors_fail(path, std::string("cannot mmap: ") + std::strerror(err));

  SafetensorsFile file;
  file.path_ = path;
  file.mapping_ = std::make_shared<const Mapping>(data, size);
  file.header_ = parse_safetensors(data, size, path);
  for (size_t i = 0; i < file.header_.tensors.size(); ++i)
    file.index_.emplace(file.header_.tensors[i].name, i);
  return file;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> names;
  names.reserve(header_.tensors.size());
  for (const SafetensorsTensorInfo& t : header_.tensors) names.push_back(t.name);
  return names;
}

const SafetensorsTensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) safetensors_fail(path_, "no tensor named '" + name + "'");
  return header_.tensors[it->second];
}

const void* SafetensorsFile::mapped_data() const { return mapping_ ? mapping_->data : nullptr; }
size_t SafetensorsFile::mapped_size() const { return mapping_ ? mapping_->size : 0; }

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsTensorInfo& t = info(name);
  auto* bytes = static_cast<unsigned char*>(mapping_->data) + header_.data_offset + t.begin;
  const size_t item = dtype_size(t.dtype);
  const Strides strides = contiguous_strides(t.shape);

  // BOOL must hold 0 or 1 (kernels rely on it); other bytes mean true, as in npy loading.
  bool needs_copy = reinterpret_cast<uintptr_t>(bytes) % item != 0;
  if (t.dtype == DType::Bool)
    for (uint64_t i = 0; i < t.nbytes() && !needs_copy; ++i) needs_copy = bytes[i] > 1;
  if (needs_copy) {
    // Unaligned data (possible in files from other writers) would be undefined behaviour to
    // read through a typed pointer: copy into aligned memory instead.
    Tensor copy = Tensor::empty(t.shape, t.dtype);
    if (t.nbytes()) std::memcpy(copy.raw_data(), bytes, t.nbytes());
    if (t.dtype == DType::Bool) {
      auto* out = static_cast<unsigned char*>(copy.raw_data());
      for (uint64_t i = 0; i < t.nbytes(); ++i) out[i] = out[i] != 0;
    }
    return copy;
  }
  // Each view owns a Storage over its own byte range; the deleter holds the mapping.
  auto storage = Storage::wrap(bytes, t.nbytes(), Device::cpu(),
                               [mapping = mapping_](void*) { (void)mapping; });
  return Tensor::from_storage(std::move(storage), t.shape, strides, 0, t.dtype);
}

// ---- SafetensorsCheckpoint ---------------------------------------------------------------

void SafetensorsCheckpoint::add_file(SafetensorsFile file) {
  const size_t position = files_.size();
  for (const SafetensorsTensorInfo& t : file.header().tensors) {
    auto [it, inserted] = where_.emplace(t.name, position);
    if (!inserted)
      safetensors_fail(source_, "tensor '" + t.name + "' is in two shards: " +
                                    files_[it->second].path() + " and " + file.path());
    names_.push_back(t.name);
  }
  files_.push_back(std::move(file));
}

SafetensorsCheckpoint SafetensorsCheckpoint::open_file(const std::string& path) {
  SafetensorsCheckpoint checkpoint;
  checkpoint.source_ = path;
  checkpoint.add_file(SafetensorsFile::open(path));
  return checkpoint;
}

SafetensorsCheckpoint SafetensorsCheckpoint::open_index(const std::string& index_path) {
  using nlohmann::json;
  std::error_code ec;
  if (fs::is_directory(index_path, ec))
    safetensors_fail(index_path, "is a directory, not an index file");
  std::ifstream in(index_path, std::ios::binary);
  if (!in) safetensors_fail(index_path, "cannot open the index for reading");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  StrictJson parsed =
      parse_json_strict(text.data(), text.data() + text.size(), index_path, "index");
  if (parsed.duplicate)
    safetensors_fail(index_path,
                     "key '" + parsed.duplicate->key + "' appears twice" +
                         (parsed.duplicate->depth > 1 ? " in \"" + parsed.duplicate->owner + "\""
                                                      : std::string()));
  json& root = parsed.value;
  if (!root.is_object() || !root.contains("weight_map") || !root["weight_map"].is_object())
    safetensors_fail(index_path, "the index must be a JSON object with a \"weight_map\" object");

  SafetensorsCheckpoint checkpoint;
  checkpoint.source_ = index_path;
  if (root.contains("metadata")) {
    if (!root["metadata"].is_object())
      safetensors_fail(index_path, "the index's \"metadata\" must be an object");
    // Scalars only: nested values are informational and not kept.
    for (const auto& [key, value] : root["metadata"].items())
      if (value.is_string())
        checkpoint.index_metadata_[key] = value.get<std::string>();
      else if (value.is_primitive())
        checkpoint.index_metadata_[key] = value.dump();
  }

  // Shards in order of first appearance in the weight map, which must name plain files.
  std::vector<std::string> shards;
  std::map<std::string, std::string> weight_map;
  for (const auto& [name, file] : root["weight_map"].items()) {
    if (!file.is_string())
      safetensors_fail(index_path, "weight_map entry '" + name + "' is a " + file.type_name() +
                                       ", expected a shard file name");
    const std::string shard = file.get<std::string>();
    const fs::path shard_path(shard);
    if (shard.empty() || shard_path.has_parent_path() || shard_path.is_absolute() || shard == "." ||
        shard == "..")
      safetensors_fail(index_path, "weight_map entry '" + name + "' names '" + shard +
                                       "': shard files must be plain file names beside the index");
    weight_map.emplace(name, shard);
    if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
  }
  const fs::path dir = fs::path(index_path).parent_path();
  for (const std::string& shard : shards) {
    const std::string path = (dir / shard).string();
    if (!fs::exists(path, ec))
      safetensors_fail(index_path,
                       "shard '" + shard + "' named in the weight_map is missing (" + path + ")");
    checkpoint.add_file(SafetensorsFile::open(path));
  }
  // The weight map and the shards' headers must agree, name by name.
  for (const auto& [name, shard] : weight_map) {
    auto it = checkpoint.where_.find(name);
    if (it == checkpoint.where_.end())
      safetensors_fail(index_path, "tensor '" + name + "' is mapped to '" + shard +
                                       "', whose header does not contain it");
    const std::string actual = fs::path(checkpoint.files_[it->second].path()).filename().string();
    if (actual != shard)
      safetensors_fail(index_path, "tensor '" + name + "' is mapped to '" + shard +
                                       "' but lies in '" + actual + "'");
  }
  for (const std::string& name : checkpoint.names_)
    if (!weight_map.count(name))
      safetensors_fail(index_path, "tensor '" + name + "' in shard " +
                                       checkpoint.files_[checkpoint.where_.at(name)].path() +
                                       " is not listed in the weight_map");
  return checkpoint;
}

const SafetensorsTensorInfo& SafetensorsCheckpoint::info(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) safetensors_fail(source_, "no tensor named '" + name + "'");
  return files_[it->second].info(name);
}

Tensor SafetensorsCheckpoint::tensor(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) safetensors_fail(source_, "no tensor named '" + name + "'");
  return files_[it->second].tensor(name);
}

const std::map<std::string, std::string>& SafetensorsCheckpoint::metadata() const {
  static const std::map<std::string, std::string> kEmpty;
  return files_.empty() ? kEmpty : files_.front().metadata();
}

SafetensorsCheckpoint open_checkpoint(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) safetensors_fail(path, "no such file or directory");
  if (!fs::is_directory(path, ec)) {
    return fs::path(path).extension() == ".json" ? SafetensorsCheckpoint::open_index(path)
                                                 : SafetensorsCheckpoint::open_file(path);
  }
  const fs::path single = fs::path(path) / "model.safetensors";
  const fs::path index = fs::path(path) / "model.safetensors.index.json";
  const bool has_single = fs::exists(single, ec), has_index = fs::exists(index, ec);
  if (has_single && has_index)
    safetensors_fail(path,
                     "holds both model.safetensors and model.safetensors.index.json; "
                     "one of them is stale — remove it");
  if (has_single) return SafetensorsCheckpoint::open_file(single.string());
  if (has_index) return SafetensorsCheckpoint::open_index(index.string());
  safetensors_fail(path, "holds neither model.safetensors nor model.safetensors.index.json");
}

}  // namespace microllm::io
