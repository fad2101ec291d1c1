#include "cli/template_tar.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "cli/context.h"

extern char** environ;

namespace space::cli {

Result<UniqueFd> openTemplateTarball(const std::string& path) {
  ASSIGN_OR_RETURN(UniqueFd fd, openLocalSource(path));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return sysError(errno, "stat {}", path);
  if (!S_ISREG(st.st_mode)) return makeError(ErrorKind::kInvalidArgument, "{} is not a tarball (a regular file)", path);
  return fd;
}

Result<UniqueFd> packTemplateDir(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return sysError(errno, "template directory {}", dir);
  if (!S_ISDIR(st.st_mode)) return makeError(ErrorKind::kInvalidArgument, "{} is not a directory", dir);
  ASSIGN_OR_RETURN(UniqueFd out, anonymousFile());
  // GNU tar rather than a walk of our own: it keeps hard links as links and xattrs, as the daemon's own
  // builds from a directory (cp -a) do.
  std::vector<std::string> args = {"tar", "-C", dir, "--numeric-owner", "--xattrs", "-cf", "-", "."};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out.get(), STDOUT_FILENO);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, "tar", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return sysError(rc, "run tar to pack {}", dir);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return sysError(errno, "wait for tar");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return makeError(ErrorKind::kInvalidArgument, "tar could not pack {} (its message is above)", dir);
  if (::lseek(out.get(), 0, SEEK_SET) != 0) return sysError(errno, "rewind the packed tree");
  return out;
}

}  // namespace space::cli
