// `microllm_alignment model`: one pass of the four-pass model alignment driven by
// tools/alignment/run.py (docs/alignment.md). Each pass is its own process, so value capture,
// operator timers and layer timers never run together.
//
//   values          inputs, every named forward value, the logits           *_values.jsonl
//   operator-timing per named value: the time since the previous one        *_operator_timing.jsonl
//   layer-timing    embedding, each block, final norm, LM head, full forward *_layer_timing.jsonl
//   training        next-token loss and every parameter gradient,           *_training_values.jsonl
//                   then backward alone timed (forward outside the timer) *_backward_timing.jsonl
//
// The model is built from --config with random weights (seed, normal(0, --init-std)) or loaded
// from a Hugging Face folder (--model); --write-parameters also saves it as one (the PyTorch
// side rebuilds the architecture from those tensors). Records are JSON lines:
//   {"kind": "value", "category": "input|operator|layer|output", "name", "occurrence",
//    "dtype", "shape", "numel", "captured", "truncated", "values": [...]}
//   {"kind": "operator_timing"|"layer_timing"|"backward_timing", "name", "occurrence",
//    "units": "ms", "samples": [...]}
// Captured values are the first --max-captured-elements elements in row-major order.
// --format safetensors writes the captured tensors whole instead (large models; HF checks).
// Timings on CUDA synchronize the device at every boundary, so each range is complete work.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "alignment_commands.h"
#include "microllm/autograd/node.h"
#include "microllm/core/error.h"
#include "microllm/io/npy.h"
#include "microllm/io/safetensors.h"
#include "microllm/model/transformer.h"
#if MICROLLM_WITH_CUDA
#include "microllm/cuda/runtime.h"
#endif

namespace microllm::alignment {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct ModelCli {
  std::string config;  // config.json for a randomly initialized model
  std::string model;   // or a Hugging Face folder to load
  std::string ids;     // int64 (B, T) .npy
  std::string output;  // folder for the records
  std::string prefix = "microllm";
  std::string pass;  // values | operator-timing | layer-timing | training
  std::string device = "cpu";
  std::string dtype = "f32";
  std::string format = "jsonl";  // jsonl | safetensors
  std::string write_parameters;  // folder for model.safetensors + config.json
  uint64_t seed = 0;
  double init_std = 0.02;
  int warmup = 5;
  int repetitions = 20;
  int64_t max_captured_elements = 1 << 20;
};

// Host waits for the device's queued work (a no-op on the CPU, which runs synchronously).
void wait_for(Device device) {
#if MICROLLM_WITH_CUDA
  if (device.is_cuda()) cuda::synchronize(cuda::current_stream(device));
#else
  (void)device;
#endif
}

double elapsed_ms(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// Where a named value sits in the model: the layer boundaries and the output, or an operator.
std::string category_of(const std::string& name) {
  if (name == "ids") return "input";
  if (name == "logits") return "output";
  if (name == "embedding" || name == "final_norm" || name.ends_with(".output")) return "layer";
  return "operator";
}

// Writes records one JSON object per line; a name seen again gets the next occurrence.
class RecordWriter {
 public:
  explicit RecordWriter(const fs::path& path) : path_(path), out_(path, std::ios::trunc) {
    MICROLLM_CHECK(out_.good(), "microllm_alignment", "cannot write ", path.string());
  }
  int64_t next_occurrence(const std::string& kind, const std::string& name) {
    return occurrences_[kind + '\x1f' + name]++;
  }
  void write(const nlohmann::json& record) { out_ << record.dump() << '\n'; }
  ~RecordWriter() { out_.flush(); }

 private:
  fs::path path_;
  std::ofstream out_;
  std::map<std::string, int64_t> occurrences_;
};

// A value record: the first `limit` elements, row-major, converted to double.
nlohmann::json value_record(const std::string& kind, const std::string& name, int64_t occurrence,
                            const Tensor& value, int64_t limit) {
  const Tensor flat = value.detach().contiguous().flatten();  // (numel)
  const int64_t captured = std::min(flat.numel(), limit);
  nlohmann::json r = {{"kind", kind},
                      {"category", category_of(name)},
                      {"name", name},
                      {"occurrence", occurrence},
                      {"dtype", std::string(dtype_name(value.dtype()))},
                      {"shape", value.shape()},
                      {"numel", value.numel()},
                      {"captured", captured},
                      {"truncated", captured < value.numel()}};
  const Tensor head = flat.narrow(0, 0, captured);
  if (is_floating(value.dtype()))
    r["values"] = head.to_vector_f64();
  else
    r["values"] = head.to_vector_i64();
  return r;
}

nlohmann::json timing_record(const std::string& kind, const std::string& name, int64_t occurrence,
                             const std::vector<double>& samples) {
  return {{"kind", kind},
          {"name", name},
          {"occurrence", occurrence},
          {"units", "ms"},
          {"samples", samples}};
}

// Captures values either as JSON records or as whole tensors for one safetensors file.
class ValueSink {
 public:
  ValueSink(const ModelCli& cli, const std::string& stem)
      : cli_(cli), path_(fs::path(cli.output) / (cli.prefix + "_" + stem)) {
    if (cli.format == "jsonl") writer_ = std::make_unique<RecordWriter>(path_.string() + ".jsonl");
  }
  void add(const std::string& kind, const std::string& name, const Tensor& value) {
    if (writer_) {
      writer_->write(value_record(kind, name, writer_->next_occurrence(kind, name), value,
                                  cli_.max_captured_elements));
      return;
    }
    const std::string key = kind + "." + name + "." + std::to_string(seen_[kind + "." + name]++);
    tensors_.emplace_back(key, value.detach().to(Device::cpu()));
  }
  void finish() {
    if (!writer_) io::save_safetensors(path_.string() + ".safetensors", tensors_);
  }

 private:
  const ModelCli& cli_;
  fs::path path_;
  std::unique_ptr<RecordWriter> writer_;
  io::NamedTensors tensors_;
  std::map<std::string, int64_t> seen_;
};

model::Transformer build_model(const ModelCli& cli, Device device, DType dtype) {
  if (!cli.model.empty()) {
    const model::ModelConfig config = model::ModelConfig::load(cli.model);
    model::Transformer m = model::Transformer::for_loading(config, device, dtype);
    io::load_into(m.parameters(), io::open_checkpoint(cli.model), /*strict=*/true);
    return m;
  }
  return model::Transformer(model::ModelConfig::load(cli.config), device, dtype, cli.seed,
                            cli.init_std);
}

void write_parameters(const model::Transformer& m, const ModelCli& cli) {
  const fs::path dir(cli.write_parameters);
  fs::create_directories(dir);
  io::NamedTensors named;
  RecordWriter summary(fs::path(cli.output) / (cli.prefix + "_parameters.jsonl"));
  for (const auto& [name, p] : m.parameters()) {
    named.emplace_back(name, p.detach());
    const std::vector<double> v = p.to_vector_f64();
    double sum = 0, sum_abs = 0;
    for (double x : v) sum += x, sum_abs += std::abs(x);
    summary.write({{"kind", "parameter"},
                   {"name", name},
                   {"dtype", std::string(dtype_name(p.dtype()))},
                   {"shape", p.shape()},
                   {"numel", p.numel()},
                   {"sum", sum},
                   {"sum_abs", sum_abs},
                   {"file", (dir / "model.safetensors").string()}});
  }
  io::save_safetensors((dir / "model.safetensors").string(), named, {{"format", "pt"}});
  std::ofstream(dir / "config.json") << m.config().to_json().dump(2) << '\n';
}

void run_values(const model::Transformer& m, const Tensor& ids, const ModelCli& cli) {
  autograd::NoGradGuard no_grad;
  ValueSink sink(cli, "values");
  sink.add("value", "ids", ids);
  m.forward(ids, Tensor(),
            [&](const std::string& name, const Tensor& v) { sink.add("value", name, v); });
  sink.finish();
}

// Runs warm-up + repetitions of `body(record)`, where body calls record(name) at each
// boundary; returns name → samples (ms), in first-seen order.
template <class Body>
std::vector<std::pair<std::string, std::vector<double>>> time_boundaries(const ModelCli& cli,
                                                                         Device device, Body body) {
  std::vector<std::pair<std::string, std::vector<double>>> rows;
  std::map<std::string, size_t> index;
  for (int rep = 0; rep < cli.warmup + cli.repetitions; ++rep) {
    const bool keep = rep >= cli.warmup;
    wait_for(device);
    Clock::time_point last = Clock::now();
    body([&](const std::string& name) {
      wait_for(device);
      const Clock::time_point now = Clock::now();
      if (keep) {
        auto [it, fresh] = index.emplace(name, rows.size());
        if (fresh) rows.push_back({name, {}});
        rows[it->second].second.push_back(elapsed_ms(last, now));
      }
      last = Clock::now();
    });
  }
  return rows;
}

void write_timings(const std::string& kind, const std::string& stem, const ModelCli& cli,
                   const std::vector<std::pair<std::string, std::vector<double>>>& rows) {
  RecordWriter out(fs::path(cli.output) / (cli.prefix + "_" + stem + ".jsonl"));
  for (const auto& [name, samples] : rows)
    out.write(timing_record(kind, name, out.next_occurrence(kind, name), samples));
}

void run_operator_timing(const model::Transformer& m, const Tensor& ids, const ModelCli& cli) {
  autograd::NoGradGuard no_grad;
  const auto rows = time_boundaries(cli, m.device(), [&](auto&& record) {
    m.forward(ids, Tensor(), [&](const std::string& name, const Tensor&) { record(name); });
  });
  write_timings("operator_timing", "operator_timing", cli, rows);
}

// Layer ranges: each block ends at layers.{i}.output; the LM head ends at logits. The whole
// forward is timed separately with no observer at all.
void run_layer_timing(const model::Transformer& m, const Tensor& ids, const ModelCli& cli) {
  autograd::NoGradGuard no_grad;
  auto rows = time_boundaries(cli, m.device(), [&](auto&& record) {
    m.forward(ids, Tensor(), [&](const std::string& name, const Tensor&) {
      if (name == "embedding" || name == "final_norm")
        record(name);
      else if (name == "logits")
        record("lm_head");
      else if (name.ends_with(".output"))
        record(name.substr(0, name.size() - std::string(".output").size()));
    });
  });
  const auto whole = time_boundaries(cli, m.device(), [&](auto&& record) {
    m.forward(ids);
    record("forward");
  });
  rows.insert(rows.end(), whole.begin(), whole.end());
  write_timings("layer_timing", "layer_timing", cli, rows);
}

void run_training(model::Transformer& m, const Tensor& ids, const ModelCli& cli) {
  m.set_requires_grad(true);
  {
    ValueSink sink(cli, "training_values");
    const Tensor loss = model::Transformer::next_token_loss(m.forward(ids), ids);
    sink.add("loss", "loss", loss);
    loss.backward();
    std::vector<std::string> missing;
    for (const auto& [name, p] : m.parameters()) {
      if (p.grad().defined())
        sink.add("gradient", name, p.grad());
      else
        missing.push_back(name);
    }
    sink.finish();
    for (const auto& name : missing)
      std::fprintf(stderr, "parameter %s received no gradient\n", name.c_str());
  }
  // Backward alone: the forward and the loss are built before the timer starts.
  std::vector<double> samples;
  for (int rep = 0; rep < cli.warmup + cli.repetitions; ++rep) {
    for (const auto& [name, p] : m.parameters()) Tensor(p).zero_grad();  // a handle: the same leaf
    const Tensor loss = model::Transformer::next_token_loss(m.forward(ids), ids);
    wait_for(m.device());
    const Clock::time_point start = Clock::now();
    loss.backward();
    wait_for(m.device());
    if (rep >= cli.warmup) samples.push_back(elapsed_ms(start, Clock::now()));
  }
  write_timings("backward_timing", "backward_timing", cli, {{"backward", samples}});
}

int run_model(ModelCli& cli) {
  MICROLLM_CHECK(
      cli.config.empty() != cli.model.empty(), "microllm_alignment",
      "give exactly one of --config (random weights) and --model (a Hugging Face folder)");
  MICROLLM_CHECK(cli.warmup >= 0 && cli.repetitions >= 1, "microllm_alignment",
                 "--warmup must be ≥ 0 and --repetitions ≥ 1, found ", cli.warmup, " and ",
                 cli.repetitions);
  MICROLLM_CHECK(cli.max_captured_elements >= 1, "microllm_alignment",
                 "--max-captured-elements must be ≥ 1, found ", cli.max_captured_elements);
  const Device device = Device::parse(cli.device);
  const DType dtype = dtype_from_name(cli.dtype);
  fs::create_directories(cli.output);
  model::Transformer m = build_model(cli, device, dtype);
  const Tensor host_ids = io::load_npy(cli.ids);
  MICROLLM_CHECK(
      host_ids.dim() == 2 && (host_ids.dtype() == DType::I64 || host_ids.dtype() == DType::I32),
      "microllm_alignment", cli.ids, " must hold an integer (B, T) array, found ",
      host_ids.describe());
  const Tensor ids = host_ids.to(DType::I64).to(device);  // (B, T)
  if (!cli.write_parameters.empty()) write_parameters(m, cli);

  const Clock::time_point start = Clock::now();
  if (cli.pass == "values") run_values(m, ids, cli);
  if (cli.pass == "operator-timing") run_operator_timing(m, ids, cli);
  if (cli.pass == "layer-timing") run_layer_timing(m, ids, cli);
  if (cli.pass == "training") run_training(m, ids, cli);
  const nlohmann::json report = {{"pass", cli.pass},
                                 {"device", device.str()},
                                 {"dtype", cli.dtype},
                                 {"model_type", m.config().model_type()},
                                 {"layers", m.config().num_layers},
                                 {"parameters", m.parameters().size()},
                                 {"ids_shape", host_ids.shape()},
                                 {"seconds", elapsed_ms(start, Clock::now()) / 1e3}};
  std::printf("%s\n", report.dump().c_str());
  return 0;
}

}  // namespace

Command add_model_command(CLI::App& parent) {
  auto c = std::make_shared<ModelCli>();
  CLI::App* cmd =
      parent.add_subcommand("model", "One pass of the model alignment (tools/alignment/run.py)");
  cmd->add_option("--config", c->config, "config.json of a model with random weights");
  cmd->add_option("--model", c->model, "Hugging Face folder (config.json + safetensors) to load");
  cmd->add_option("--seed", c->seed, "seed of the random weights")->capture_default_str();
  cmd->add_option("--init-std", c->init_std, "standard deviation of the random weights")
      ->capture_default_str();
  cmd->add_option("--ids", c->ids, "int64 (B, T) .npy of input ids")->required();
  cmd->add_option("--output", c->output, "folder for the records")->required();
  cmd->add_option("--prefix", c->prefix, "file name prefix of the records")->capture_default_str();
  cmd->add_option("--pass", c->pass, "which pass to run")
      ->required()
      ->check(CLI::IsMember({"values", "operator-timing", "layer-timing", "training"}));
  cmd->add_option("--device", c->device, "cpu or cuda[:N]")->capture_default_str();
  cmd->add_option("--dtype", c->dtype, "f32 or bf16")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--format", c->format, "jsonl records, or whole tensors in safetensors")
      ->check(CLI::IsMember({"jsonl", "safetensors"}))
      ->capture_default_str();
  cmd->add_option("--write-parameters", c->write_parameters,
                  "also save the model as a Hugging Face folder here (+ PREFIX_parameters.jsonl)");
  cmd->add_option("--warmup", c->warmup, "untimed repetitions first")->capture_default_str();
  cmd->add_option("--repetitions", c->repetitions, "timed repetitions")->capture_default_str();
  cmd->add_option("--max-captured-elements", c->max_captured_elements,
                  "elements captured per value (the rest is marked truncated)")
      ->capture_default_str();
  return {cmd, [c] { return run_model(*c); }};
}

}  // namespace microllm::alignment
