# feedd, the server: config, worker pool, gRPC service, metrics, sample cache.
#
# server/net/grpc151/ holds what rests on gRPC 1.51's internals (feedd's own
# listener handing TLS connections over through a private C++ class, and the
# transport guard, which reads gRPC's peer names): it is built only against
# the gRPC core it was written and checked for, core 29.0.0 (gRPC 1.51.x,
# Debian 12's libgrpc-dev), and checked again at start against the library
# loaded (service.c). Any other core, or FEED_GRPC151=OFF, builds feedd on
# gRPC's own listener with the limits gRPC provides.
option(FEED_GRPC151 "use server/net/grpc151 (feedd's listener, the transport guard) on gRPC core 29" ON)
set(FEEDD_GRPC151_CORE "29.0.0")
set(FEEDD_GRPC151_SOURCES "")
set(FEEDD_GRPC151_DEFS FEEDD_GRPC_CORE_BUILT="${GRPC_grpc_VERSION}")
if(FEED_GRPC151 AND GRPC_grpc_VERSION VERSION_EQUAL FEEDD_GRPC151_CORE)
  set(FEEDD_GRPC151_SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/net/grpc151/guard.c
    ${CMAKE_CURRENT_LIST_DIR}/net/grpc151/handoff.cc)
  list(APPEND FEEDD_GRPC151_DEFS FEEDD_GRPC151_CORE="${FEEDD_GRPC151_CORE}")
else()
  message(STATUS "feedd: gRPC core ${GRPC_grpc_VERSION} (FEED_GRPC151=${FEED_GRPC151}): built "
    "without server/net/grpc151, runs on gRPC's own listener")
endif()

add_executable(feedd
  ${CMAKE_CURRENT_LIST_DIR}/feedd.c
  ${CMAKE_CURRENT_LIST_DIR}/config.c
  ${CMAKE_CURRENT_LIST_DIR}/work/fd_budget.c
  ${CMAKE_CURRENT_LIST_DIR}/work/pool.c
  ${CMAKE_CURRENT_LIST_DIR}/work/encoded.c
  ${CMAKE_CURRENT_LIST_DIR}/work/share.c
  ${CMAKE_CURRENT_LIST_DIR}/work/fetch.c
  ${CMAKE_CURRENT_LIST_DIR}/service/service.c
  ${CMAKE_CURRENT_LIST_DIR}/service/ports.c
  ${CMAKE_CURRENT_LIST_DIR}/service/unary.c
  ${CMAKE_CURRENT_LIST_DIR}/service/stream_sm.c
  ${CMAKE_CURRENT_LIST_DIR}/service/stream.c
  ${CMAKE_CURRENT_LIST_DIR}/service/request.c
  ${CMAKE_CURRENT_LIST_DIR}/service/memory.c
  ${CMAKE_CURRENT_LIST_DIR}/service/batch_pack.c
  ${CMAKE_CURRENT_LIST_DIR}/metrics.c
  ${CMAKE_CURRENT_LIST_DIR}/fleet.c
  ${CMAKE_CURRENT_LIST_DIR}/net/listener.c
  ${FEEDD_GRPC151_SOURCES}
  ${CMAKE_CURRENT_LIST_DIR}/net/certcheck.c
  ${CMAKE_CURRENT_LIST_DIR}/net/trust.c
  ${CMAKE_CURRENT_LIST_DIR}/work/cache.c
  ${CMAKE_CURRENT_LIST_DIR}/work/window.c
  ${CMAKE_CURRENT_LIST_DIR}/work/crc_combine.c)
target_include_directories(feedd PRIVATE ${FEED_SERVER_INCLUDE_DIRS})
target_compile_definitions(feedd PRIVATE ${FEEDD_GRPC151_DEFS})
target_link_libraries(feedd PRIVATE feedengine feedsource feedcommon feedproto PkgConfig::GRPC
  PkgConfig::MHD PkgConfig::OPENSSL Threads::Threads)
install(TARGETS feedd RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT feedd)
