// Empty: `import MultipeerConnectivity.MCAdvertiserAssistant` brings the Swift module MultipeerConnectivity, which declares it.
