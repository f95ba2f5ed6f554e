# cmake -DIN=FILE -DOUT=FILE -P embed_source.cmake: writes OUT as one C++
# raw string literal holding IN's text (a kernel source the program compiles
# at run time, e.g. with NVRTC), for `#include` after an `=`. The delimiter
# is "strata"; IN must not contain )strata".
file(READ "${IN}" text)
string(FIND "${text}" ")strata\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains )strata\", the raw string's delimiter")
endif()
file(WRITE "${OUT}.tmp" "R\"strata(${text})strata\"\n")
file(RENAME "${OUT}.tmp" "${OUT}")
