#include "runtime/model/model.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <thread>

#include "runtime/model/data.h"
#include "runtime/model/datasets.h"
#include "runtime/model/optimizer.h"
#include "units/units.h"

namespace weft::runtime {
namespace {

Batch synthetic_batch(const std::string& model, int batch) {
  return make_data({.model = model, .synthetic = true, .batch = batch, .seed = 7})->next();
}

torch::Tensor forward(LayeredModel& model, const torch::Tensor& input) {
  torch::Tensor x = input;
  for (int l = 0; l < model.num_layers(); ++l) x = model.forward_layer(l, x);
  return x;
}

class EveryModel : public testing::TestWithParam<std::string> {};

TEST_P(EveryModel, ForwardAndBackwardHaveTheExpectedShapes) {
  torch::set_num_threads(1);
  const auto model = make_model(GetParam(), 1);
  const Batch batch = synthetic_batch(GetParam(), 3);
  const torch::Tensor output = forward(*model, batch.input);
  const bool text = GetParam() == "gpt-tiny";
  const std::vector<std::int64_t> expected =
      text ? std::vector<std::int64_t>{3, 64, 256} : std::vector<std::int64_t>{3, 10};
  EXPECT_EQ(output.sizes().vec(), expected);

  const torch::Tensor loss = model->loss(output, batch.target);
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
  loss.backward();
  for (const auto& item : model->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_EQ(item.value().grad().sizes(), item.value().sizes()) << item.key();
  }
  const std::int64_t correct = model->correct(output, batch.target);
  EXPECT_GE(correct, 0);
  EXPECT_LE(correct, batch.target.numel());
}

TEST_P(EveryModel, LayersOwnEveryParameterExactlyOnce) {
  const auto model = make_model(GetParam(), 0);
  std::multiset<const void*> owned;
  for (int l = 0; l < model->num_layers(); ++l) {
    for (const torch::Tensor& p : model->layer_parameters(l)) owned.insert(p.unsafeGetTensorImpl());
  }
  std::multiset<const void*> all;
  for (const torch::Tensor& p : model->parameters()) all.insert(p.unsafeGetTensorImpl());
  EXPECT_EQ(owned, all);
  EXPECT_EQ(std::set<const void*>(owned.begin(), owned.end()).size(), owned.size());
}

TEST_P(EveryModel, HasNoBuffersToSynchronise) {
  // Note [No state outside parameters] in models.cc.
  EXPECT_TRUE(make_model(GetParam(), 0)->buffers().empty());
}

TEST_P(EveryModel, LayerProfileCountsTheLayersParameters) {
  const auto model = make_model(GetParam(), 0);
  const Profile profile = model->layer_profile(GetParam(), 16);
  ASSERT_EQ(profile.size(), model->num_layers());
  std::int64_t total = 0;
  for (const torch::Tensor& p : model->parameters()) total += p.numel();
  EXPECT_EQ(profile.total_params(), total);
  for (int l = 0; l < profile.size(); ++l) {
    EXPECT_EQ(profile.layers[l].name, model->layer_name(l));
    EXPECT_GT(profile.layers[l].params, 0) << profile.layers[l].name;
    EXPECT_EQ(profile.layers[l].bytes_per_param, 4);
  }
  EXPECT_EQ(profile.model, GetParam());
  EXPECT_EQ(profile.batch, 16);
}

void expect_equal_parameters(LayeredModel& a, LayeredModel& b, bool equal) {
  const auto pa = a.parameters(), pb = b.parameters();
  ASSERT_EQ(pa.size(), pb.size());
  bool all_equal = true;
  for (std::size_t i = 0; i < pa.size(); ++i) all_equal = all_equal && torch::equal(pa[i], pb[i]);
  EXPECT_EQ(all_equal, equal);
}

TEST_P(EveryModel, TheSeedDeterminesTheParameters) {
  const auto a = make_model(GetParam(), 11);
  const auto b = make_model(GetParam(), 11);
  const auto c = make_model(GetParam(), 12);
  expect_equal_parameters(*a, *b, true);
  expect_equal_parameters(*a, *c, false);
}

TEST_P(EveryModel, ModelsBuiltOnThreadsAtOnceAreIdentical) {
  // Multi-rank tests run ranks as threads (Note [Deterministic initialisation]).
  std::vector<std::shared_ptr<LayeredModel>> models(4);
  std::vector<std::thread> threads;
  const std::string name = GetParam();
  for (auto& m : models) threads.emplace_back([&m, &name] { m = make_model(name, 5); });
  for (auto& t : threads) t.join();
  for (const auto& m : models) expect_equal_parameters(*models[0], *m, true);
}

INSTANTIATE_TEST_SUITE_P(Runtime, EveryModel, testing::ValuesIn(model_names()), [](const auto& info) {
  return info.param == "gpt-tiny" ? std::string("gpt_tiny") : info.param;
});

TEST(MakeModel, AnUnknownNameListsTheAcceptedOnes) {
  try {
    make_model("resnet");
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("resnet"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("mlp, cnn, gpt-tiny"), std::string::npos);
  }
}

}  // namespace
}  // namespace weft::runtime

namespace weft::runtime {
namespace {

// Trains on 2,016 real images (63 batches of 32) for 5 passes with the layer-wise
// loop the engine runs, and checks that the loss falls and the model generalises.
class ImageModel : public testing::TestWithParam<std::string> {};

TEST_P(ImageModel, LearnsFashionMnist) {
  if (!std::filesystem::exists(kFashionMnistDir)) GTEST_SKIP() << "needs Debian's dataset-fashion-mnist";
  torch::set_num_threads(1);
  const auto data = make_data({.model = GetParam(), .batch = 32, .seed = 1});
  std::vector<Batch> batches;
  for (int i = 0; i < 63; ++i) batches.push_back(data->next());
  const auto model = make_model(GetParam(), 1);
  std::vector<std::vector<torch::Tensor>> params;
  for (int l = 0; l < model->num_layers(); ++l) params.push_back(model->layer_parameters(l));
  LayerOptimizer optimizer(params, {.kind = "momentum", .lr = 0.02, .momentum = 0.9});

  std::vector<double> pass_loss;
  for (int pass = 0; pass < 5; ++pass) {
    double sum = 0;
    for (const Batch& batch : batches) {
      const torch::Tensor loss = model->loss(forward(*model, batch.input), batch.target);
      loss.backward();
      for (int l = model->num_layers() - 1; l >= 0; --l) {
        optimizer.step(l);
        optimizer.zero_grad(l);
      }
      sum += loss.item<double>();
    }
    pass_loss.push_back(sum / batches.size());
  }
  EXPECT_LT(pass_loss.back(), 0.5 * pass_loss.front()) << pass_loss.front() << " -> " << pass_loss.back();

  torch::NoGradGuard no_grad;
  const std::vector<Batch> test = data->eval_batches(1000);
  const std::int64_t correct = model->correct(forward(*model, test[0].input), test[0].target);
  EXPECT_GT(correct, 650) << "of 1000 test images";
}

INSTANTIATE_TEST_SUITE_P(Runtime, ImageModel, testing::Values("mlp", "cnn"));

}  // namespace
}  // namespace weft::runtime
