# Warnings as errors for the project's own targets (not for third-party code). No
# -Wnull-dereference: with -O3, GCC 12 reports it inside libstdc++ containers where no null exists.
function(stalloc_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion
    -Wno-sign-conversion -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
    -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough)
  if(STALLOC_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
