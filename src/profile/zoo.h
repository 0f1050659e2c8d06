// The model zoo: exact parameter shapes of well-known models, and a compute-time
// model per device preset (docs/design.md §1.1).
//
// Each zoo model is the list of its parameter-owning modules in forward order, with
// the exact parameter counts of the reference implementation (torchvision for the
// CNNs, HuggingFace for the transformers). Compute time of a layer is
// FLOPs(layer, batch) / effective FLOP/s of the device; backward = 2 x forward.
//
// Thread-safety: pure functions over constant tables.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "profile/profile.h"

namespace weft {

struct DevicePreset {
  std::string name;
  double effective_flops;  // sustained FLOP/s on training kernels (fp32/tf32 mix)
  std::string source;      // where the number comes from
  // Fixed cost of one layer pass (kernel launch and framework dispatch): the
  // floor of a zoo layer's forward time, so that a layer with few FLOPs (a norm,
  // an embedding lookup) does not take 0 s.
  Seconds launch_overhead = 0;
};

// The device table, in one place with sources (see STYLE: no scattered literals).
const std::vector<DevicePreset>& device_presets();
// THROWS UsageError listing the accepted names.
const DevicePreset& device_preset(std::string_view name);

// Names of the zoo models: resnet18, resnet50, vgg16, bert-base, gpt2, llama-176m.
std::vector<std::string> zoo_models();

struct ZooOptions {
  int batch = 32;                // samples per worker per iteration
  std::string device = "v100";   // a device preset name
  int sequence_length = 0;       // transformers; 0 = the model's default (128 for
                                 // bert-base, 1024 for gpt2, 512 for llama-176m)
};

// The profile of zoo model `name`. THROWS UsageError listing the accepted names
// for an unknown model or device.
Profile zoo_profile(std::string_view name, const ZooOptions& options = {});

}  // namespace weft
