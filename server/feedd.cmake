# feedd, the server: config, worker pool, gRPC service, metrics, sample cache.
add_executable(feedd
  ${CMAKE_CURRENT_LIST_DIR}/feedd.c
  ${CMAKE_CURRENT_LIST_DIR}/config.c
  ${CMAKE_CURRENT_LIST_DIR}/work/fd_budget.c
  ${CMAKE_CURRENT_LIST_DIR}/work/pool.c
  ${CMAKE_CURRENT_LIST_DIR}/service/service.c
  ${CMAKE_CURRENT_LIST_DIR}/service/unary.c
  ${CMAKE_CURRENT_LIST_DIR}/service/stream_sm.c
  ${CMAKE_CURRENT_LIST_DIR}/service/stream.c
  ${CMAKE_CURRENT_LIST_DIR}/service/request.c
  ${CMAKE_CURRENT_LIST_DIR}/service/memory.c
  ${CMAKE_CURRENT_LIST_DIR}/service/batch_pack.c
  ${CMAKE_CURRENT_LIST_DIR}/metrics.c
  ${CMAKE_CURRENT_LIST_DIR}/net/listener.c
  ${CMAKE_CURRENT_LIST_DIR}/guard.c
  ${CMAKE_CURRENT_LIST_DIR}/handoff.cc
  ${CMAKE_CURRENT_LIST_DIR}/net/certcheck.c
  ${CMAKE_CURRENT_LIST_DIR}/net/trust.c
  ${CMAKE_CURRENT_LIST_DIR}/work/cache.c
  ${CMAKE_CURRENT_LIST_DIR}/work/crc_combine.c)
target_include_directories(feedd PRIVATE ${FEED_SERVER_INCLUDE_DIRS})
target_link_libraries(feedd PRIVATE feedengine feedsource feedcommon feedproto PkgConfig::GRPC
  PkgConfig::MHD PkgConfig::OPENSSL Threads::Threads)
install(TARGETS feedd RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT feedd)
