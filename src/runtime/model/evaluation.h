// Evaluation of a model on the test split (`weft train --eval-every`), and the
// agreed model of local SGD: the workers' average of their parameters, evaluated
// beside rank 0's own (docs/local-sgd.md).
//
// Thread-safety: evaluate runs forwards on `model`; nothing else may use it then.
#pragma once

#include <vector>

#include <torch/torch.h>

#include "runtime/model/data.h"
#include "runtime/model/model.h"

namespace weft::runtime {

struct EvalResult {
  double accuracy = 0;  // correct predictions / targets
  double loss = 0;      // mean per sample
};

// The model's accuracy and loss over data.eval_batches(batch), in eval mode
// without gradients; leaves the model in training mode.
EvalResult evaluate(LayeredModel& model, DataSource& data, int batch);

// Copies `flat` (every layer's parameters flattened and concatenated in layer
// order, as average_parameters and --save-params lay them out) into `model`'s
// parameters. THROWS std::logic_error if the sizes differ.
void load_flat_parameters(LayeredModel& model, const torch::Tensor& flat);

// Every parameter of `layers`, flattened and concatenated in layer order (a copy).
torch::Tensor flat_parameters(const std::vector<std::vector<torch::Tensor>>& layers);

}  // namespace weft::runtime
