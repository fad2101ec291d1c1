// Template memory snapshots: boot one VM of a template with its RAM in a shared file, wait for the agent,
// stop it and save only the device state (QMP migrate with x-ignore-shared: the RAM is already in the
// file). Each new VM then maps that file privately (copy-on-write) and loads the device state with
// -incoming defer + migrate-incoming: nothing is booted, unmodified pages stay shared between all VMs
// of the template, and the template's files never change.
#pragma once

#include <chrono>
#include <string>

#include "common/result.h"
#include "runtime/vm/launch.h"
#include "runtime/vm/qmp.h"

namespace space::vm {

struct TemplateFiles {
  std::string memory, state;
  static TemplateFiles in(const std::string& dir) { return {dir + "/memory", dir + "/state"}; }
};

// Sets x-ignore-shared, migrates the stopped VM's device state to `state_file` and waits for completion.
Status saveDeviceState(QmpClient& qmp, const std::string& state_file, std::chrono::milliseconds timeout);
// On a VMM started with -incoming defer: loads `state_file` and waits until the guest runs.
Status loadDeviceState(QmpClient& qmp, const std::string& state_file, std::chrono::milliseconds timeout);

}  // namespace space::vm
