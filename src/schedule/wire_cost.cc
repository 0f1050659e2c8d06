#include "schedule/wire_cost.h"

#include <algorithm>

namespace weft {
namespace {

double cost_of(const Host& host, const std::string& codec) {
  const auto found = host.codec_cost.find(codec);
  return found == host.codec_cost.end() ? 0.0 : found->second;
}

}  // namespace

WireCost wire_cost(const Encoding& encoding, const std::vector<Chunk>& chunks, const Profile& profile,
                   const Host& host) {
  Bytes values = 0;
  for (const Chunk& c : chunks) values += c.length / 4;
  if (!low_rank(encoding)) {
    return {.bytes = elementwise_wire_bytes(encoding, values),
            .compute = lossy(encoding) ? cost_of(host, to_string(encoding)) * static_cast<double>(values) : 0};
  }
  // As the runtime splits a message: Note [Which tensors PowerSGD factorises].
  const bool alternate = encoding.codec == Encoding::Codec::kAcpSgd;
  WireCost cost;
  double matrix_work = 0;  // Σ rows·cols·R
  Bytes whole_values = 0;
  for (const Chunk& c : chunks) {
    const Layer& layer = profile.layers.at(static_cast<size_t>(c.layer));
    const Bytes begin = c.offset / 4, end = begin + c.length / 4;
    if (layer.shapes.empty()) {
      whole_values += end - begin;
      continue;
    }
    Bytes t_begin = 0;
    for (const auto& shape : layer.shapes) {
      Bytes n = 1;
      for (std::int64_t d : shape) n *= d;
      const Bytes t_end = t_begin + n;
      const Bytes a = std::max(begin, t_begin), b = std::min(end, t_end);
      if (a < b) {
        const MatrixShape m = matrix_shape(n, shape.size(), shape.empty() ? n : shape[0]);
        const Bytes rows = m.rows, cols = m.cols;
        const Bytes factors = powersgd_wire_bytes(rows, cols, encoding.rank);
        if (a == t_begin && b == t_end && factorised(m, encoding.rank)) {
          // acpsgd sends P and Q in alternate messages: half the factors on average.
          cost.bytes += alternate ? factors / 2 : factors;
          cost.exchanges = alternate ? 1 : 2;
          matrix_work += static_cast<double>(n) * std::min<Bytes>(encoding.rank, std::min(rows, cols));
        } else {
          whole_values += b - a;
        }
      }
      t_begin = t_end;
    }
  }
  cost.bytes += elementwise_wire_bytes(encoding, whole_values);
  // The factors' arithmetic per rows·cols·R; powersgd's rest is cast to fp16 and back.
  cost.compute = alternate ? cost_of(host, "acpsgd") * matrix_work
                           : cost_of(host, "powersgd") * matrix_work +
                                 cost_of(host, "fp16") * static_cast<double>(whole_values);
  return cost;
}

}  // namespace weft
