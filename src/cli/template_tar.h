// The client's side of a template upload (PUT /v1/templates/{name}/archive): the tar stream to send, from
// a tarball, stdin, or a local root filesystem directory packed here for a daemon on another host.
#pragma once

#include <string>

#include "common/result.h"
#include "common/unique_fd.h"

namespace space::cli {

// A readable file holding the tar stream: the file itself, or stdin ("-") spooled when it is a pipe (an
// upload needs its length up front).
Result<UniqueFd> openTemplateTarball(const std::string& path);

// The directory as a tar stream in an anonymous temporary file, packed by GNU tar the way a root
// filesystem needs it (numeric owners, modes, hard links, symlinks, xattrs), names relative to dir.
Result<UniqueFd> packTemplateDir(const std::string& dir);

}  // namespace space::cli
