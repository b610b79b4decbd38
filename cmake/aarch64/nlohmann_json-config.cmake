# cmake/aarch64-linux-gnu.cmake: nlohmann-json is header-only, its headers from the host's /usr/include.
if(NOT TARGET nlohmann_json::nlohmann_json)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
endif()
