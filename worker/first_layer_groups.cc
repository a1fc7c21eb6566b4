#include "worker/first_layer_groups.h"

namespace pstrain {

bool group_first_layer_by_server(nn::DataParallelModel<float>& model, const std::vector<ChunkInfo>& chunks,
                                 uint32_t servers) {
  const int kernel = model.first_replica().first_layer_kernel();
  if (kernel < 0 || servers == 0) return false;
  const ParamInfo& info = model.layout().params()[static_cast<size_t>(kernel)];
  std::vector<uint32_t> groups = row_servers(chunks, static_cast<uint32_t>(kernel), static_cast<size_t>(info.shape[0]),
                                             static_cast<size_t>(info.shape[1]));
  if (groups.empty()) return false;
  model.set_first_layer_row_groups(groups, servers);
  return true;
}

}  // namespace pstrain
