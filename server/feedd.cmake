# feedd, the server: config, worker pool, gRPC service, metrics, sample cache.
add_executable(feedd
  ${CMAKE_CURRENT_LIST_DIR}/feedd.c
  ${CMAKE_CURRENT_LIST_DIR}/config.c
  ${CMAKE_CURRENT_LIST_DIR}/fd_budget.c
  ${CMAKE_CURRENT_LIST_DIR}/pool.c
  ${CMAKE_CURRENT_LIST_DIR}/share.c
  ${CMAKE_CURRENT_LIST_DIR}/service.c
  ${CMAKE_CURRENT_LIST_DIR}/unary.c
  ${CMAKE_CURRENT_LIST_DIR}/stream_sm.c
  ${CMAKE_CURRENT_LIST_DIR}/stream.c
  ${CMAKE_CURRENT_LIST_DIR}/request.c
  ${CMAKE_CURRENT_LIST_DIR}/memory.c
  ${CMAKE_CURRENT_LIST_DIR}/batch_pack.c
  ${CMAKE_CURRENT_LIST_DIR}/metrics.c
  ${CMAKE_CURRENT_LIST_DIR}/listener.c
  ${CMAKE_CURRENT_LIST_DIR}/guard.c
  ${CMAKE_CURRENT_LIST_DIR}/handoff.cc
  ${CMAKE_CURRENT_LIST_DIR}/certcheck.c
  ${CMAKE_CURRENT_LIST_DIR}/trust.c
  ${CMAKE_CURRENT_LIST_DIR}/cache.c
  ${CMAKE_CURRENT_LIST_DIR}/crc_combine.c)
target_include_directories(feedd PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(feedd PRIVATE feedengine feedcommon feedproto PkgConfig::GRPC
  PkgConfig::MHD PkgConfig::OPENSSL Threads::Threads)
install(TARGETS feedd RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT feedd)
