// What every part of the manager shares: the node's configuration, its database and its tiers. Each
// service gets it by reference from core::Manager, which owns the pieces and outlives the services.
#pragma once

#include <string>

#include "core/config.h"
#include "runtime/registry.h"
#include "runtime/runtime.h"
#include "store/store.h"

namespace space::core {

struct Context {
  const DaemonConfig& config;
  store::Store& store;
  const runtime::Registry& runtimes;

  // Rows of a tier this node does not run (any more) go to the default tier, which cleans what it can.
  runtime::Runtime& runtimeFor(const std::string& name) const {
    runtime::Runtime* rt = runtimes.find(name);
    return rt ? *rt : *runtimes.all().front();
  }
};

}  // namespace space::core
