#include "schedule/wire_cost.h"

#include <algorithm>

namespace weft {
namespace {

double cost_of(const Host& host, const std::string& codec) {
  const auto found = host.codec_cost.find(codec);
  return found == host.codec_cost.end() ? 0.0 : found->second;
}

// Adds what `c` carries to `sum`, tensor by tensor, as the runtime splits a
// message: Note [Which tensors PowerSGD factorises].
void add_chunk(const Encoding& encoding, const Chunk& c, const Profile& profile, Payload& sum) {
  sum.bytes += c.length;
  const Layer& layer = profile.layers.at(static_cast<size_t>(c.layer));
  const Bytes begin = c.offset / 4, end = begin + c.length / 4;
  if (!low_rank(encoding) || layer.shapes.empty()) {
    sum.whole_values += end - begin;
    return;
  }
  const bool alternate = encoding.codec == Encoding::Codec::kAcpSgd;
  Bytes t_begin = 0;
  for (const auto& shape : layer.shapes) {
    Bytes n = 1;
    for (std::int64_t d : shape) n *= d;
    const Bytes t_end = t_begin + n;
    const Bytes a = std::max(begin, t_begin), b = std::min(end, t_end);
    if (a < b) {
      const MatrixShape m = matrix_shape(n, shape.size(), shape.empty() ? n : shape[0]);
      if (a == t_begin && b == t_end && factorised(m, encoding.rank)) {
        const Bytes factors = powersgd_wire_bytes(m.rows, m.cols, encoding.rank);
        // acpsgd sends P and Q in alternate messages, in fp16: a quarter of
        // PowerSGD's float32 factors on average.
        sum.factor_bytes += alternate ? factors / 4 : factors;
        sum.matrix_work += static_cast<double>(n) * std::min<Bytes>(encoding.rank, std::min(m.rows, m.cols));
        ++sum.matrices;
      } else {
        sum.whole_values += b - a;
      }
    }
    t_begin = t_end;
  }
}

}  // namespace

Payload& Payload::operator+=(const Payload& other) {
  bytes += other.bytes;
  whole_values += other.whole_values;
  factor_bytes += other.factor_bytes;
  matrix_work += other.matrix_work;
  matrices += other.matrices;
  return *this;
}

Payload payload(const Encoding& encoding, const Chunk& chunk, const Profile& profile) {
  Payload sum;
  add_chunk(encoding, chunk, profile, sum);
  return sum;
}

WireCost wire_cost(const Encoding& encoding, const Payload& payload, const Host& host) {
  if (!lossy(encoding)) return {.bytes = payload.bytes};
  if (!low_rank(encoding)) {
    return {.bytes = elementwise_wire_bytes(encoding, payload.whole_values),
            .compute = cost_of(host, to_string(encoding)) * static_cast<double>(payload.whole_values)};
  }
  const bool alternate = encoding.codec == Encoding::Codec::kAcpSgd;
  // PowerSGD's Q sum waits for its P sum (its fp16 rest runs beside P); acpsgd
  // sends P or Q, and the rest, in one fp16 sum.
  return {.bytes = payload.factor_bytes + elementwise_wire_bytes(encoding, payload.whole_values),
          // The factors' arithmetic per rows·cols·R; the rest is cast to fp16 and back.
          .compute = cost_of(host, alternate ? "acpsgd" : "powersgd") * payload.matrix_work +
                     cost_of(host, "fp16") * static_cast<double>(payload.whole_values),
          .exchanges = payload.matrices > 0 && !alternate ? 2 : 1};
}

WireCost wire_cost(const Encoding& encoding, const std::vector<Chunk>& chunks, const Profile& profile,
                   const Host& host) {
  Payload sum;
  for (const Chunk& c : chunks) add_chunk(encoding, c, profile, sum);
  return wire_cost(encoding, sum, host);
}

// Note [A message's collectives].
Flow encoded_allreduce_flow(const Cluster& cluster, const WireCost& cost, Reach reach) {
  Flow flow = allreduce_flow(cluster, cost.bytes, reach);
  if (cost.exchanges == 1 && cost.compute == 0) return flow;
  flow.startup = flow.startup * cost.exchanges + cost.compute + (cost.exchanges - 1) * cluster.host.core_wait;
  return flow;
}

Seconds encoded_allreduce_time(const AllReduceTime& time, const Cluster& cluster, const WireCost& cost,
                               Reach reach) {
  Seconds alone = time(cost.bytes);
  if (cost.exchanges > 1) {
    alone += (cost.exchanges - 1) * (allreduce_flow(cluster, cost.bytes, reach).startup + cluster.host.core_wait);
  }
  return alone + cost.compute;
}

}  // namespace weft
