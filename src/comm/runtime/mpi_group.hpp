#pragma once
// What every backend over an MPI communicator knows of its members: the group's name, this
// process's index and each member's world rank.
#include <string>
#include <vector>

#include "comm/api/collectives.hpp"
#include "comm/runtime/mpi_session.hpp"

namespace strata::comm {

class MpiGroup : public Collectives {
 public:
  MpiGroup(const MpiGroup&) = delete;  // a backend owns its MPI communicator
  MpiGroup& operator=(const MpiGroup&) = delete;
  const std::string& name() const final { return name_; }
  int size() const final { return int(world_ranks_.size()); }
  int index() const final { return position_; }
  int world_rank_of(int index) const final { return world_ranks_.at(index); }

 protected:
  MpiGroup(MPI_Comm comm, std::string name) : name_(std::move(name)), world_ranks_(world_ranks_of(comm)) {
    MPI_Comm_rank(comm, &position_);
  }

  std::string name_;
  int position_ = 0;
  std::vector<int> world_ranks_;
};

}  // namespace strata::comm
