# The version every strata binary prints with --version:
#
#   strata-worker 0.1.0 (git 1a2b3c4)          # a clean checkout
#   strata-worker 0.1.0 (git 1a2b3c4-dirty)    # uncommitted changes
#   strata-worker 0.1.0 (git unknown)          # no git, or not a checkout
#
# The number is project(VERSION); the commit is `git describe` of the
# source tree when CMake configures (tags excluded: the abbreviated commit
# id alone). Configuring again follows a new commit: the checkout's HEAD and
# the branch it points to are configure dependencies. Uncommitted edits made
# after the last configure do not add "-dirty" until the next one.
#
# Defines STRATA_GIT_DESCRIBE and the INTERFACE target strata_version,
# whose generated header strata_version.h (in the build tree) has
#   STRATA_VERSION          "0.1.0"
#   STRATA_GIT_DESCRIBE     "1a2b3c4-dirty" or "unknown"
#   strata::version_line(program) -> "PROGRAM 0.1.0 (git 1a2b3c4-dirty)"
set(STRATA_GIT_DESCRIBE "unknown")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(
    COMMAND ${GIT_EXECUTABLE} describe --always --dirty --abbrev=7 --exclude=*
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    RESULT_VARIABLE git_rc OUTPUT_VARIABLE git_out ERROR_QUIET
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(git_rc EQUAL 0 AND git_out MATCHES "^[0-9a-f]+(-dirty)?$")
    set(STRATA_GIT_DESCRIBE "${git_out}")
    # HEAD, and the branch file it names when it is one (a packed ref has
    # no file of its own: then only HEAD).
    execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --symbolic-full-name HEAD
                    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                    OUTPUT_VARIABLE branch ERROR_QUIET
                    OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT branch MATCHES "^refs/")  # a detached HEAD prints "HEAD"
      set(branch "")
    endif()
    foreach(ref HEAD ${branch})
      execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --path-format=absolute
                              --git-path ${ref}
                      WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                      OUTPUT_VARIABLE ref_path ERROR_QUIET
                      OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(ref_path AND EXISTS "${ref_path}")
        set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${ref_path}")
      endif()
    endforeach()
  endif()
endif()

set(STRATA_VERSION_DIR ${PROJECT_BINARY_DIR}/generated)
configure_file(${CMAKE_CURRENT_LIST_DIR}/strata_version.h.in
               ${STRATA_VERSION_DIR}/strata_version.h @ONLY)
add_library(strata_version INTERFACE)
target_include_directories(strata_version INTERFACE
                           $<BUILD_INTERFACE:${STRATA_VERSION_DIR}>)
