#include "comm/runtime/agree.hpp"

#include "comm/runtime/wait.hpp"

namespace strata::comm {

std::vector<std::string> all_gather_strings(MPI_Comm comm, const std::string& local, std::string_view collective,
                                            std::string_view group) {
  int n = 0;
  MPI_Comm_size(comm, &n);
  int len = static_cast<int>(local.size());
  std::vector<int> lens(n), displs(n);
  // Non-blocking forms, waited for under the collective timeout.
  MPI_Request request;
  MPI_Iallgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm, &request);
  wait_mpi_collective(request, comm, collective, group, "MPI_Iallgather");
  int total = 0;
  for (int i = 0; i < n; ++i) {
    displs[i] = total;
    total += lens[i];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  MPI_Iallgatherv(local.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, comm, &request);
  wait_mpi_collective(request, comm, collective, group, "MPI_Iallgatherv");
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(all.substr(static_cast<std::size_t>(displs[i]), static_cast<std::size_t>(lens[i])));
  return out;
}

}  // namespace strata::comm
