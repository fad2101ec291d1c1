// The stream objects AgentClient hands out; each owns one channel of the connection.
#pragma once

#include <memory>

#include "agent/client/agent_client.h"
#include "agent/client/connection.h"

namespace space::agent {

std::unique_ptr<ExecStream> makeExecStream(std::shared_ptr<Connection> conn, uint32_t ch, int pid, bool has_stdin);
std::unique_ptr<OutputReader> makeOutputReader(std::shared_ptr<Connection> conn, uint32_t ch);
std::unique_ptr<FileReader> makeFileReader(std::shared_ptr<Connection> conn, uint32_t ch, uint64_t size);
std::unique_ptr<FileWriter> makeFileWriter(std::shared_ptr<Connection> conn, uint32_t ch);

ExitStatus exitStatusFrom(const nlohmann::json& ev);

}  // namespace space::agent
