# feedengine: the preprocessing engine (decode → crop → resize → flip), linked
# by feedd, the benchmarks and the tests.
add_library(feedengine STATIC
  ${CMAKE_CURRENT_LIST_DIR}/engine.c
  ${CMAKE_CURRENT_LIST_DIR}/jmem.c
  ${CMAKE_CURRENT_LIST_DIR}/resize.c)
target_include_directories(feedengine PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(feedengine PUBLIC feedcommon PkgConfig::JPEG m)
# The resize kernels are the per-core hot loop: let the compiler unroll and
# vectorise them even in RelWithDebInfo (-O2).
if(NOT CMAKE_BUILD_TYPE STREQUAL "Debug")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/resize.c PROPERTIES COMPILE_OPTIONS -O3)
endif()
