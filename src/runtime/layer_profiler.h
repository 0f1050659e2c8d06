// Measures the per-layer forward and backward times of a runtime model on this
// machine (`weft profile --model`, SPEC §1.1 source 2), giving a profile the
// planner reads like any other (SPEC §6).
//
// Method: each iteration runs the forward layer by layer, every layer's input a
// fresh leaf that requires grad (the batch input for layer 0), timing each
// layer's forward (the last layer's includes the loss); then the backward layer
// by layer in reverse, each layer's autograd run alone from its output gradient
// (the loss for the last layer) to its parameters' and input's gradients. The
// first `warmup` iterations are discarded; a layer's time is the median of the
// next `iterations`.
//
// Note [One thread per worker]
// By default LibTorch runs with one intra-op thread (torch::set_num_threads(1)):
// the K local workers of `weft train --nproc K` share this machine's 2 cores, and
// a worker that measured itself with both cores would be profiled faster than it
// will run. `threads` changes it for machines with a core per worker to spare.
//
// Thread-safety: sets LibTorch's global intra-op thread count; run one at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "profile/profile.h"
#include "runtime/data.h"
#include "runtime/model.h"

namespace weft::runtime {

struct LayerProfilerOptions {
  std::string model = "cnn";  // a name of model_names()
  int batch = 32;             // per worker, as in training
  int warmup = 3;
  int iterations = 20;
  int threads = 1;            // Note [One thread per worker]
  std::uint64_t seed = 0;
  // Called after each timed or warm-up iteration with (done, warmup + iterations);
  // may be empty.
  std::function<void(int done, int total)> progress;
};

// Builds `options.model` and a synthetic batch of its shape and measures it.
// THROWS UsageError for an unknown model, a batch, warmup, iterations or threads
// out of range (naming the field and what is accepted).
Profile profile_model(const LayerProfilerOptions& options);

// Measures `model` on `batch`; options.model only names the profile, whose batch
// is the batch's size. Leaves the model's gradients set. REQUIRES: the batch fits
// the model.
Profile profile_model(LayeredModel& model, const Batch& batch, const LayerProfilerOptions& options);

}  // namespace weft::runtime
