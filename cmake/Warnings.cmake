# Warnings as errors for the project's own targets (not for third-party code).
function(stalloc_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion
    -Wno-sign-conversion -Wnon-virtual-dtor -Wold-style-cast -Wcast-align -Wnull-dereference
    -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough)
  if(STALLOC_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
