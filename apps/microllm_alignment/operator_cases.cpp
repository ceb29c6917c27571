// Operator cases: the table of every microllm operator by the name case.json uses, and the
// loop that loads a case's inputs, runs the operator (and its backward) and writes the
// outputs. The protocol is described in operator_cases.h.
#include "operator_cases.h"

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

#include "microllm/autograd/node.h"
#include "microllm/io/npy.h"
#include "microllm/ops/ops.h"

namespace microllm::alignment {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kTag = "operator case";

// The operator's inputs by name, and its scalar arguments.
struct Call {
  std::map<std::string, Tensor> inputs;
  std::vector<std::string> order;  // input names as listed in case.json
  json args;

  const Tensor& in(const std::string& name) const {
    auto it = inputs.find(name);
    MICROLLM_CHECK(it != inputs.end(), kTag, "missing input '", name, "'");
    return it->second;
  }
  Tensor optional(const std::string& name) const {
    auto it = inputs.find(name);
    return it == inputs.end() ? Tensor() : it->second;
  }
  template <class T>
  T arg(const std::string& name) const {
    MICROLLM_CHECK(args.contains(name), kTag, "missing argument '", name, "'");
    return args.at(name).get<T>();
  }
  template <class T>
  T arg(const std::string& name, T fallback) const {
    return args.contains(name) && !args.at(name).is_null() ? args.at(name).get<T>() : fallback;
  }
};

// Named outputs; the first is "out".
using Outputs = std::vector<std::pair<std::string, Tensor>>;
using OpFn = std::function<Outputs(const Call&)>;

Outputs one(Tensor t) { return {{"out", std::move(t)}}; }

// Every operator and view of microllm, by the name case.json uses.
const std::map<std::string, OpFn>& dispatch_table() {
  static const std::map<std::string, OpFn> table = {
      // ---- elementwise ---------------------------------------------------------------------
      {"add", [](const Call& c) { return one(ops::add(c.in("a"), c.in("b"))); }},
      {"sub", [](const Call& c) { return one(ops::sub(c.in("a"), c.in("b"))); }},
      {"mul", [](const Call& c) { return one(ops::mul(c.in("a"), c.in("b"))); }},
      {"div", [](const Call& c) { return one(ops::div(c.in("a"), c.in("b"))); }},
      {"neg", [](const Call& c) { return one(ops::neg(c.in("x"))); }},
      {"scale", [](const Call& c) { return one(ops::scale(c.in("x"), c.arg<double>("factor"))); }},
      {"add_scalar",
       [](const Call& c) { return one(ops::add_scalar(c.in("x"), c.arg<double>("value"))); }},
      {"pow", [](const Call& c) { return one(ops::pow(c.in("x"), c.arg<double>("exponent"))); }},
      {"exp", [](const Call& c) { return one(ops::exp(c.in("x"))); }},
      {"log", [](const Call& c) { return one(ops::log(c.in("x"))); }},
      {"sqrt", [](const Call& c) { return one(ops::sqrt(c.in("x"))); }},
      {"rsqrt", [](const Call& c) { return one(ops::rsqrt(c.in("x"))); }},
      // ---- reductions ----------------------------------------------------------------------
      {"sum",
       [](const Call& c) {
         return one(ops::sum(c.in("x"), c.arg<int64_t>("dim"), c.arg("keepdim", false)));
       }},
      {"mean",
       [](const Call& c) {
         return one(ops::mean(c.in("x"), c.arg<int64_t>("dim"), c.arg("keepdim", false)));
       }},
      {"max",
       [](const Call& c) {
         return one(ops::max(c.in("x"), c.arg<int64_t>("dim"), c.arg("keepdim", false)));
       }},
      {"argmax",
       [](const Call& c) {
         return one(ops::argmax(c.in("x"), c.arg<int64_t>("dim"), c.arg("keepdim", false)));
       }},
      {"sum_all", [](const Call& c) { return one(ops::sum_all(c.in("x"))); }},
      {"mean_all", [](const Call& c) { return one(ops::mean_all(c.in("x"))); }},
      // ---- matrix products -----------------------------------------------------------------
      {"matmul",
       [](const Call& c) {
         return one(
             ops::matmul(c.in("a"), c.in("b"), c.arg("trans_a", false), c.arg("trans_b", false)));
       }},
      {"linear",
       [](const Call& c) {
         return one(ops::linear(c.in("x"), c.in("weight"), c.optional("bias")));
       }},
      // ---- normalization and activations ---------------------------------------------------
      {"softmax",
       [](const Call& c) { return one(ops::softmax(c.in("x"), c.arg<int64_t>("dim", -1))); }},
      {"log_softmax",
       [](const Call& c) { return one(ops::log_softmax(c.in("x"), c.arg<int64_t>("dim", -1))); }},
      {"rms_norm",
       [](const Call& c) {
         return one(ops::rms_norm(c.in("x"), c.in("weight"), c.arg<double>("eps")));
       }},
      {"add_rms_norm",
       [](const Call& c) {
         ops::AddRmsNormResult r =
             ops::add_rms_norm(c.in("x"), c.in("residual"), c.in("weight"), c.arg<double>("eps"));
         return Outputs{{"out", r.normed}, {"sum", r.sum}};
       }},
      {"silu", [](const Call& c) { return one(ops::silu(c.in("x"))); }},
      {"swiglu", [](const Call& c) { return one(ops::swiglu(c.in("gate"), c.in("up"))); }},
      // ---- positions, embeddings, loss, attention ------------------------------------------
      {"rope_inv_freq",
       [](const Call& c) {
         return one(ops::rope_inv_freq(c.arg<int64_t>("head_dim"), c.arg<double>("theta")));
       }},
      {"rope",
       [](const Call& c) {
         // inv_freq from an input file when given (F64 cases), else rope_inv_freq(D, theta).
         Tensor inv_freq = c.optional("inv_freq");
         if (!inv_freq.defined())
           inv_freq = ops::rope_inv_freq(c.in("x").size(-1), c.arg<double>("theta"));
         return one(ops::rope(c.in("x"), c.in("positions"), inv_freq));
       }},
      {"rope_qkv_heads",
       [](const Call& c) {
         // inv_freq from an input file when given (F64 cases), else rope_inv_freq(D, theta).
         Tensor inv_freq = c.optional("inv_freq");
         if (!inv_freq.defined())
           inv_freq = ops::rope_inv_freq(c.in("qkv").size(-1), c.arg<double>("theta"));
         const ops::QkvHeads heads =
             ops::rope_qkv_heads(c.in("qkv"), c.arg<int64_t>("num_heads"),
                                 c.arg<int64_t>("num_kv_heads"), c.in("positions"), inv_freq);
         Outputs out = one(heads.q);
         out.emplace_back("k", heads.k);
         out.emplace_back("v", heads.v);
         return out;
       }},
      {"embedding", [](const Call& c) { return one(ops::embedding(c.in("weight"), c.in("ids"))); }},
      {"cross_entropy",
       [](const Call& c) {
         return one(ops::cross_entropy(c.in("logits"), c.in("targets"),
                                       c.arg<int64_t>("ignore_index", -100)));
       }},
      {"attention",
       [](const Call& c) {
         ops::AttentionOptions options;
         options.causal = c.arg("causal", true);
         options.scale = c.arg("scale", static_cast<double>(NAN));  // null or absent: 1/sqrt(D)
         options.q_positions = c.optional("q_positions");
         options.k_positions = c.optional("k_positions");
         return one(ops::attention(c.in("q"), c.in("k"), c.in("v"), options));
       }},
      // ---- structural ----------------------------------------------------------------------
      {"cast",
       [](const Call& c) {
         return one(ops::cast(c.in("x"), dtype_from_name(c.arg<std::string>("to"))));
       }},
      {"concat",
       [](const Call& c) {
         std::vector<Tensor> parts;  // every input, in case.json order
         for (const std::string& name : c.order) parts.push_back(c.in(name));
         return one(ops::concat(parts, c.arg<int64_t>("dim")));
       }},
      {"join",
       [](const Call& c) {
         std::vector<Tensor> parts;  // every input, in case.json order
         for (const std::string& name : c.order) parts.push_back(c.in(name));
         return one(ops::join(parts, c.arg<int64_t>("dim")));
       }},
      {"split",
       [](const Call& c) {
         const std::vector<Tensor> parts =
             ops::split(c.in("x"), c.arg<int64_t>("dim"), c.arg<std::vector<int64_t>>("sizes"));
         Outputs out = one(parts[0]);  // the others as part1, part2, ...
         for (size_t i = 1; i < parts.size(); ++i)
           out.emplace_back("part" + std::to_string(i), parts[i]);
         return out;
       }},
      {"index_select",
       [](const Call& c) {
         return one(ops::index_select(c.in("x"), c.arg<int64_t>("dim"), c.in("index")));
       }},
      // ---- views ---------------------------------------------------------------------------
      {"reshape", [](const Call& c) { return one(c.in("x").reshape(c.arg<Shape>("shape"))); }},
      {"view", [](const Call& c) { return one(c.in("x").view(c.arg<Shape>("shape"))); }},
      {"permute",
       [](const Call& c) { return one(c.in("x").permute(c.arg<std::vector<int64_t>>("dims"))); }},
      {"transpose",
       [](const Call& c) {
         return one(c.in("x").transpose(c.arg<int64_t>("dim0"), c.arg<int64_t>("dim1")));
       }},
      {"narrow",
       [](const Call& c) {
         return one(c.in("x").narrow(c.arg<int64_t>("dim"), c.arg<int64_t>("start"),
                                     c.arg<int64_t>("length")));
       }},
      {"slice",
       [](const Call& c) {
         return one(c.in("x").slice(c.arg<int64_t>("dim"), c.arg<int64_t>("start"),
                                    c.arg<int64_t>("end")));
       }},
      {"expand", [](const Call& c) { return one(c.in("x").expand(c.arg<Shape>("shape"))); }},
      {"squeeze", [](const Call& c) { return one(c.in("x").squeeze(c.arg<int64_t>("dim"))); }},
      {"unsqueeze", [](const Call& c) { return one(c.in("x").unsqueeze(c.arg<int64_t>("dim"))); }},
      {"flatten",
       [](const Call& c) {
         return one(
             c.in("x").flatten(c.arg<int64_t>("start_dim", 0), c.arg<int64_t>("end_dim", -1)));
       }},
      {"contiguous", [](const Call& c) { return one(c.in("x").contiguous()); }},
  };
  return table;
}

// Applies the view transforms of one input (also used on its gradient).
Tensor apply_views(Tensor t, const json& views) {
  for (const json& v : views) {
    const std::string kind = v.at("kind").get<std::string>();
    if (kind == "transpose_last2") {
      t = t.transpose(-2, -1);
    } else if (kind == "permute") {
      t = t.permute(v.at("dims").get<std::vector<int64_t>>());
    } else if (kind == "narrow") {
      t = t.narrow(v.at("dim").get<int64_t>(), v.at("start").get<int64_t>(),
                   v.at("length").get<int64_t>());
    } else {
      MICROLLM_FAIL(kTag, "unknown view kind '", kind, "'");
    }
  }
  return t;
}

}  // namespace

CaseRun run_operator_case(const fs::path& case_dir, const fs::path& out_dir, Device device) {
  std::ifstream file(case_dir / "case.json");
  MICROLLM_CHECK(file.good(), kTag, "cannot open ", (case_dir / "case.json").string());
  const json spec = json::parse(file);
  const std::string op = spec.at("op").get<std::string>();
  const auto& table = dispatch_table();
  const auto entry = table.find(op);
  MICROLLM_CHECK(entry != table.end(), kTag, "unknown op '", op, "'");
  const std::string dtype_name = spec.value("dtype", std::string());
  CaseRun run{op, {}, false};

  Call call;
  call.args = spec.value("args", json::object());
  std::vector<std::pair<std::string, Tensor>> leaves;  // inputs that require a gradient
  std::map<std::string, json> views;
  for (const json& input : spec.value("inputs", json::array())) {
    const std::string name = input.at("name").get<std::string>();
    Tensor t = io::load_npy((case_dir / (name + ".npy")).string());
    if (input.contains("dtype")) {
      t = t.to(dtype_from_name(input.at("dtype").get<std::string>()));
    } else if (!dtype_name.empty() && is_floating(t.dtype())) {
      t = t.to(dtype_from_name(dtype_name));
    }
    t = t.to(device);  // before marking the leaf, so its gradient lives on the device too
    if (input.value("requires_grad", false)) {
      t.set_requires_grad(true);
      leaves.emplace_back(name, t);
    }
    views[name] = input.value("view", json::array());
    call.inputs[name] = apply_views(t, views[name]);
    call.order.push_back(name);
  }

  const Outputs outputs = entry->second(call);
  auto save = [&](const std::string& name, const Tensor& t) {
    io::save_npy((out_dir / (name + ".npy")).string(), t);  // copies to the host when needed
    run.written.push_back(name + ".npy");
  };
  for (const auto& [name, t] : outputs) save(name, t);
  if (leaves.empty()) return run;

  // Backward from every output that has a grad_output file.
  std::vector<Tensor> roots, grads;
  for (const auto& [name, t] : outputs) {
    const fs::path g =
        case_dir / (name == "out" ? "grad_output.npy" : "grad_output_" + name + ".npy");
    if (!fs::exists(g)) continue;
    roots.push_back(t);
    grads.push_back(io::load_npy(g.string()).to(t.dtype()).to(t.device()));
  }
  if (roots.empty()) return run;
  autograd::run_backward(roots, grads);
  run.backward = true;
  for (const auto& [name, leaf] : leaves) {
    Tensor grad = leaf.grad();
    MICROLLM_CHECK(grad.defined(), kTag, "no gradient reached input '", name, "'");
    save("grad_" + name, apply_views(grad, views[name]));
  }
  return run;
}

std::vector<std::string> operator_names() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : dispatch_table()) names.push_back(name);
  return names;  // std::map keeps them sorted
}

}  // namespace microllm::alignment
