# Warnings for the project's own targets: call strata_warnings(target).
function(strata_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow
                         -Wnon-virtual-dtor -Wimplicit-fallthrough)
  if(STRATA_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
